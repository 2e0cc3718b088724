/**
 * Forwarded headers cannot inject CRLF (issue #8). Envoy's codecs refuse CR, LF and NUL in header
 * values from clients; the service does not rely on it: a header it would forward with such a
 * byte (a stray ext_proc client can send one) is dropped from every side call, and headers it sets
 * on Envoy's request are validated before they leave.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { connect } from 'node:net';
import { buildHeaderMutation } from '../../src/extproc/headers';
import { parseConfig } from '../../src/config/config';
import { silentLogger } from '../../src/observability/logger';
import { startService, type RunningService } from '../../src/service';
import { EnvoyClient, headerEntries } from '../protocol/envoy-client';
import { startStack, type Stack } from '../support/stack';

/** An HTTP/1.1 origin that keeps every request exactly as it arrived on the wire. */
class RawOrigin {
  readonly heads: string[] = [];
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();

  async start(): Promise<this> {
    this.server = createServer((sock) => {
      this.sockets.add(sock);
      sock.on('close', () => this.sockets.delete(sock));
      let buf = Buffer.alloc(0);
      sock.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        for (;;) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const head = buf.subarray(0, end).toString('latin1');
          const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
          if (buf.length < end + 4 + length) return;
          buf = buf.subarray(end + 4 + length);
          this.heads.push(head);
          const path = head.split(' ')[1] ?? '';
          // Render answers token ids; everything else (prefill) an empty object.
          const body = path.endsWith('/render') ? '[{"request_id":"r","token_ids":[1,2,3]}]' : '{}';
          sock.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
        }
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    return this;
  }

  get url(): string {
    const a = this.server!.address();
    return `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}`;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server!.close(() => r()));
  }
}

const INJECTIONS: Array<[string, string]> = [
  ['x-crlf', 'a\r\nx-injected: crlf'],
  ['x-lf', 'a\nx-injected: lf'],
  ['x-cr', 'a\rx-injected: cr'],
  ['x-nul', 'a\u0000x-injected: nul'],
  ['x-injected\r\nx-injected', 'name'],
  ['authorization', 'Bearer t\r\n\r\nGET /smuggled HTTP/1.1'],
];

describe('CRLF in headers a side call would forward (ext_proc level)', () => {
  let origin: RawOrigin;
  let service: RunningService;
  let client: EnvoyClient;

  beforeAll(async () => {
    origin = await new RawOrigin().start();
    const config = parseConfig(
      {
        server: { listen_addr: '127.0.0.1:0', metrics_addr: '127.0.0.1:0' },
        gateway: { address: origin.url },
        pipeline: { steps: [{ type: 'render', params: { address: origin.url } }, { type: 'prefill' }, { type: 'decode' }] },
      },
      {},
    );
    service = await startService(config, { log: silentLogger() });
    client = new EnvoyClient(service.grpcPort);
  });
  afterAll(async () => {
    client?.close();
    await service?.close(500);
    await origin?.stop();
  });

  // The header policy (src/pipeline/header-policy.ts): a value the service would pass on must be
  // visible ASCII, so the request is refused with a 400 naming the header, before any side call.
  // (A bad x-request-id alone is replaced, never refused: see the next test.)
  it('a control character in a header value is a 400 naming it; no side call runs, nothing is smuggled', async () => {
    const s = client.open();
    s.sendHeaders(
      [[':method', 'POST'], [':path', '/v1/completions'], ['x-request-id', 'ok\r\nx-injected: id'], ['x-keep', 'kept'], ...INJECTIONS],
      { requestBodyMode: 'FULL_DUPLEX_STREAMED' },
    );
    s.sendBody(Buffer.from(JSON.stringify({ model: 'm', prompt: 'hello', max_tokens: 2 })), true);
    const answer = await s.next();
    expect(answer.response).toBe('immediate_response');
    const ir = answer.immediate_response!;
    expect(ir.status!.code).toBe('BadRequest');
    const body = ir.body!.toString();
    expect(JSON.parse(body).error.message).toMatch(/^header "x-crlf" has a value that is not visible ASCII \(request_id: [0-9a-f-]{36}\)$/);
    expect(body).not.toContain('injected');
    for (const v of Object.values(headerEntries(ir.headers))) expect(v).not.toMatch(/[\r\n\0]/);
    s.end();
    await s.rest();
    expect(origin.heads).toHaveLength(0);
  });

  it('a bad x-request-id alone is replaced; the request still succeeds and the workers see no injected line', async () => {
    const s = client.open();
    s.sendHeaders(
      [
        [':method', 'POST'],
        [':path', '/v1/completions'],
        ['x-request-id', 'ok\r\nx-injected: id'],
        ['x-keep', 'kept'],
        ['x-injected\r\nx-injected', 'name'],
      ],
      {
        requestBodyMode: 'FULL_DUPLEX_STREAMED',
      },
    );
    s.sendBody(Buffer.from(JSON.stringify({ model: 'm', prompt: 'hello', max_tokens: 2 })), true);
    const answer = await s.next();
    expect(answer.response).toBe('request_headers');
    const set = headerEntries(answer.request_headers!.response!.header_mutation);
    for (const v of Object.values(set)) expect(v).not.toMatch(/[\r\n\0]/);
    expect(set['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    s.end();
    await s.rest();

    expect(origin.heads).toHaveLength(2); // render, prefill
    for (const head of origin.heads) {
      const lines = head.split('\r\n');
      expect(lines.filter((l) => /^x-injected/i.test(l))).toEqual([]);
      expect(lines).toContain('x-keep: kept');
      for (const line of lines) expect(line).not.toMatch(/[\r\n\0]/);
    }
  });
});

describe('header mutations the service sends to Envoy', () => {
  it('a value with CR, LF or NUL is dropped (and reported), never sent', () => {
    const dropped = { invalid: [] as string[] };
    const m = buildHeaderMutation(
      { set: { 'x-ok': 'fine', 'x-crlf': 'a\r\nx-injected: 1', 'x-lf': 'a\nb', 'x-nul': 'a\u0000b', 'bad name': 'v' } },
      dropped,
    );
    expect(m.set_headers.map((h) => h.header.key)).toEqual(['x-ok']);
    expect(dropped.invalid.sort()).toEqual(['bad name', 'x-crlf', 'x-lf', 'x-nul']);
  });

  it('the same names every time (they are remembered): lower case, trimmed values, bad names dropped again, past the bound too', () => {
    for (let round = 0; round < 2; round++) {
      const dropped = { invalid: [] as string[] };
      const set: Record<string, string> = { 'X-Round': ` r${round}\t`, 'Bad Name': 'v', 'x-plain': 'as is' };
      // Past the bound of remembered names: each new one is still checked.
      for (let i = 0; i < 300; i++) set[`X-Many-${round}-${i}`] = String(i);
      const m = buildHeaderMutation({ set, remove: ['X-Gone', 'bad\tname', 'x-round'] }, dropped);
      const got = Object.fromEntries(m.set_headers.map((h) => [h.header.key, h.header.raw_value.toString('latin1')]));
      expect(got['x-round']).toBe(`r${round}`);
      expect(got['x-plain']).toBe('as is');
      expect(got[`x-many-${round}-299`]).toBe('299');
      expect(Object.keys(got).filter((k) => k !== k.toLowerCase())).toEqual([]);
      // A name that is set is not also removed.
      expect(m.remove_headers).toEqual(['x-gone']);
      expect(dropped.invalid.sort()).toEqual(['bad\tname', 'bad name']);
    }
  });
});

describe('CR, LF and NUL from an HTTP client, through Envoy', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await stack?.close();
  });

  function raw(headerLine: string): Promise<number> {
    return new Promise((resolve) => {
      const body = JSON.stringify({ model: 'sim-model', prompt: [1, 2], max_tokens: 1 });
      const sock = connect({ host: '127.0.0.1', port: stack.envoy.publicPort });
      let got = '';
      const done = (): void => {
        sock.destroy();
        resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0));
      };
      sock.setTimeout(3000, done);
      sock.on('data', (d: Buffer) => {
        got += d.toString('latin1');
        if (got.includes('\r\n\r\n')) done();
      });
      sock.on('error', done);
      sock.on('close', done);
      sock.write(
        `POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${headerLine}\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
        'latin1',
      );
    });
  }

  it.each([
    ['a bare CR', 'x-a: b\rx-injected: 1'],
    ['a NUL', 'x-a: b\u0000x-injected: 1'],
    ['obs-fold', 'x-a: b\r\n x-injected: 1'],
  ])('%s never becomes a header of its own at a worker', async (_what, line) => {
    stack.reset();
    const status = await raw(line);
    // Envoy refuses the request (NUL), or folds the bytes into the one value (bare CR dropped,
    // obs-fold unfolded to a space, as RFC 9112 allows a proxy to do).
    expect([200, 400]).toContain(status);
    for (const sim of Object.values(stack.sims)) {
      for (const r of sim.requests) {
        expect(r.headers).not.toHaveProperty('x-injected');
        expect(r.headers['x-a']).not.toMatch(/[\r\n\0]/);
      }
    }
  });
});
