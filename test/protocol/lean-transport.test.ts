/**
 * The lean transport (src/extproc/lean-transport.ts) carries `Process`; grpc-js keeps the listener,
 * TLS and every other service on the same port. Its own edges are checked here with a raw HTTP/2
 * client (what no gRPC client sends: a compressed flag, an oversize length, a bad content-type), and
 * its answers against grpc-js's own for the same conversations. Every other protocol suite runs on
 * the lean transport (the default).
 */
import * as http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import { startExtProcServer, type ExtProcServer, type ExtProcServerOptions } from '../../src/extproc';
import { PROCESS_PATH } from '../../src/extproc/lean-transport';
import { extProcServiceDefinition } from '../../src/extproc/proto';
import { silentLogger } from '../../src/observability/logger';
import { HealthProbe } from '../unit/observability/health-client';
import { makeTestPki, type TestPki } from '../unit/observability/certs';
import { EnvoyClient, type EnvoyStream, type ProcessingResponseMsg } from './envoy-client';
import { eventually, forward, respond, ScriptedHandler } from './fake-handler';
import { chatHeaders, expectStillServing, NS, patternBytes } from './harness';

interface Served {
  readonly server: ExtProcServer;
  readonly handler: ScriptedHandler;
  readonly client: EnvoyClient;
  close(): Promise<void>;
}

async function serve(opts: Partial<ExtProcServerOptions> = {}, clientCredentials?: grpc.ChannelCredentials): Promise<Served> {
  const handler = new ScriptedHandler();
  const server = await startExtProcServer({
    address: '127.0.0.1:0',
    handler,
    maxBodyBytes: 64 * 1024 * 1024,
    metadataNamespace: NS,
    fallbackBodyMode: 'full_duplex',
    log: silentLogger(),
    configure: (s) => new HealthImplementation({ '': 'SERVING' }).addToServer(s),
    ...opts,
  });
  const client = new EnvoyClient(server.port, clientCredentials);
  return {
    server,
    handler,
    client,
    async close() {
      client.close();
      await server.shutdown(500);
    },
  };
}

// ---- a raw HTTP/2 client, for what a gRPC client never sends ----

const requestSerialize = extProcServiceDefinition()['Process']!.requestSerialize as (m: object) => Buffer;

function frame(message: Buffer, compressed = false): Buffer {
  const head = Buffer.alloc(5);
  head[0] = compressed ? 1 : 0;
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message]);
}

const HEADERS_MESSAGE = requestSerialize({
  request_headers: { headers: { headers: [{ key: ':path', raw_value: Buffer.from('/v1/chat/completions') }] }, end_of_stream: false },
  protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'NONE' },
});

interface RawAnswer {
  readonly status: number;
  readonly grpcStatus: string | undefined;
  readonly grpcMessage: string | undefined;
  readonly contentType: string | undefined;
}

/** One request on `path`; resolves once the server ended its side (trailers, or trailers-only). */
async function raw(
  port: number,
  opts: { path?: string; headers?: http2.OutgoingHttpHeaders; data?: Buffer; end?: boolean },
): Promise<RawAnswer> {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  try {
    return await new Promise<RawAnswer>((resolve, reject) => {
      session.once('error', reject);
      const req = session.request({
        ':method': 'POST',
        ':path': opts.path ?? PROCESS_PATH,
        'content-type': 'application/grpc',
        te: 'trailers',
        ...opts.headers,
      });
      let head: http2.IncomingHttpHeaders = {};
      req.on('response', (h) => (head = h));
      req.on('error', reject);
      const done = (t: http2.IncomingHttpHeaders): void =>
        resolve({
          status: Number(head[':status']),
          grpcStatus: (t['grpc-status'] ?? head['grpc-status']) as string | undefined,
          grpcMessage: (t['grpc-message'] ?? head['grpc-message']) as string | undefined,
          contentType: head['content-type'],
        });
      let trailers: http2.IncomingHttpHeaders = {};
      req.on('trailers', (t) => (trailers = t));
      req.on('end', () => done(trailers));
      req.resume();
      if (opts.data) req.write(opts.data);
      if (opts.end !== false) req.end();
    });
  } finally {
    session.close();
  }
}

/** grpc.health.v1 Check of the overall service, as a kubelet or Envoy's health checker asks. */
async function health(port: number, credentials?: grpc.ChannelCredentials): Promise<string> {
  const probe = new HealthProbe(`127.0.0.1:${port}`, credentials);
  try {
    return await probe.check('');
  } finally {
    probe.close();
  }
}

let lean: Served;
let grpcJs: Served;
beforeAll(async () => {
  lean = await serve();
  grpcJs = await serve({ transport: 'grpc-js' });
});
afterAll(async () => {
  await lean.close();
  await grpcJs.close();
});

describe('which transport carries Process', () => {
  it('the lean transport by default (this grpc-js can be hooked), grpc-js when asked', () => {
    expect(lean.server.transport).toBe('lean');
    expect(grpcJs.server.transport).toBe('grpc-js');
  });
});

describe('the lean transport answers as grpc-js does', () => {
  /** Runs one conversation on `s` and returns what Envoy would see of it. */
  type Script = (stream: EnvoyStream) => Promise<void>;
  async function conversation(s: Served, script: Script): Promise<{ messages: ProcessingResponseMsg[]; code: number; aborts: number }> {
    s.handler.reset(() => ({
      decide: (body) =>
        body.length > 0
          ? forward({ setHeaders: { 'epp-profile': 'decode' }, body: Buffer.concat([body, body]) })
          : respond(204, {}, Buffer.alloc(0)),
    }));
    const stream = s.client.open();
    await script(stream);
    const messages = await stream.rest();
    const code = (await stream.status).code;
    await eventually(() => s.server.activeStreams() === 0, 'stream closed');
    return { messages, code, aborts: s.handler.exchanges.reduce((n, e) => n + e.aborts.length, 0) };
  }
  // Small: jest compares Buffers byte by byte.
  const body = patternBytes(20_000);
  const scripts: Array<[string, Script]> = [
    [
      'FULL_DUPLEX forward in chunks, then the half-close',
      async (st) => {
        st.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
        st.sendBodyChunks(body, 4096, true);
        await st.next();
        st.end();
      },
    ],
    [
      'BUFFERED forward with trailers',
      async (st) => {
        st.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
        await st.next();
        st.sendBody(body, false);
        st.sendTrailers();
        await st.next();
        st.end();
      },
    ],
    [
      'a headers-only request answered with an immediate response',
      async (st) => {
        st.sendHeaders(chatHeaders(), { endOfStream: true, requestBodyMode: 'FULL_DUPLEX_STREAMED' });
        await st.next();
        st.end();
      },
    ],
    [
      'Envoy half-closes mid-body (the exchange is aborted, the call ends OK)',
      async (st) => {
        st.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
        st.sendBody(body.subarray(0, 1000), false);
        await new Promise((r) => setTimeout(r, 50));
        st.end();
      },
    ],
  ];
  it.each(scripts)('%s', async (_name, script) => {
    const a = await conversation(lean, script);
    const b = await conversation(grpcJs, script);
    expect(a).toEqual(b);
    expect(a.code).toBe(grpc.status.OK);
  });

  it("reads x-epd-origin from the call's metadata, as grpc-js does", async () => {
    for (const s of [lean, grpcJs]) {
      s.handler.reset(() => null);
      const md = new grpc.Metadata();
      md.set('x-epd-origin', 'async-processor');
      const marked = s.client.open(md);
      marked.sendHeaders(chatHeaders(), { endOfStream: true });
      await marked.next();
      marked.end();
      const plain = s.client.open();
      plain.sendHeaders(chatHeaders(), { endOfStream: true });
      await plain.next();
      plain.end();
      await Promise.all([marked.status, plain.status]);
      expect(s.handler.heads.map((h) => h.origin)).toEqual(['async-processor', undefined]);
    }
  });

  it('a pass-through echo while Envoy reads nothing: reading stops, then every chunk comes back in order', async () => {
    lean.handler.reset(() => null);
    const st = lean.client.open();
    st.pause();
    st.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    const chunks = Array.from({ length: 200 }, () => patternBytes(65_536));
    chunks.forEach((c, i) => st.sendBody(c, i === chunks.length - 1));
    await new Promise((r) => setTimeout(r, 300));
    st.resume();
    expect((await st.next()).response).toBe('request_headers');
    const echoed: Buffer[] = [];
    while (echoed.length < chunks.length) echoed.push((await st.next()).request_body!.response!.body_mutation!.streamed_response!.body);
    expect(echoed.every((c, i) => c.equals(chunks[i]!))).toBe(true);
    st.end();
    expect((await st.status).code).toBe(grpc.status.OK);
  });
});

describe("the lean call's own edges (a raw HTTP/2 client)", () => {
  it('a compressed message without grpc-encoding: INTERNAL, no exchange begins', async () => {
    lean.handler.reset(() => ({}));
    const a = await raw(lean.server.port, { data: frame(HEADERS_MESSAGE, true) });
    expect(a).toMatchObject({ status: 200, grpcStatus: String(grpc.status.INTERNAL), contentType: 'application/grpc' });
    expect(lean.handler.heads).toEqual([]);
    await expectStillServing(lean);
  });

  it('a message compressed with gzip: UNIMPLEMENTED (only identity is accepted)', async () => {
    lean.handler.reset(() => ({}));
    const a = await raw(lean.server.port, { headers: { 'grpc-encoding': 'gzip' }, data: frame(HEADERS_MESSAGE, true) });
    expect(a.grpcStatus).toBe(String(grpc.status.UNIMPLEMENTED));
    expect(decodeURI(a.grpcMessage ?? '')).toContain('gzip');
    expect(lean.handler.heads).toEqual([]);
  });

  it('a message longer than the receive limit: RESOURCE_EXHAUSTED from its length prefix alone', async () => {
    const small = await serve({ maxBodyBytes: 100_000 });
    try {
      small.handler.reset(() => ({}));
      // messageLimits(100 000): 2 x 100 000 + 1 MiB may arrive; announce one byte more, send 10.
      const head = Buffer.alloc(5);
      head.writeUInt32BE(2 * 100_000 + 1024 * 1024 + 1, 1);
      const a = await raw(small.server.port, { data: Buffer.concat([frame(HEADERS_MESSAGE), head, Buffer.alloc(10)]), end: false });
      expect(a.grpcStatus).toBe(String(grpc.status.RESOURCE_EXHAUSTED));
      // The message before it was served, and its exchange aborted when the call ended.
      await eventually(() => small.handler.exchanges[0]?.aborts.length === 1, 'exchange aborted');
      await eventually(() => small.server.activeStreams() === 0, 'stream released');
      await expectStillServing(small);
    } finally {
      await small.close();
    }
  });

  it('bytes that are not a ProcessingRequest: INTERNAL', async () => {
    const a = await raw(lean.server.port, { data: frame(Buffer.from([0x0f, 0xff, 0xff])) });
    expect(a.grpcStatus).toBe(String(grpc.status.INTERNAL));
    await expectStillServing(lean);
  });

  it('a content-type that is not gRPC: HTTP 415, no call', async () => {
    lean.handler.reset(() => ({}));
    const a = await raw(lean.server.port, { headers: { 'content-type': 'application/json' }, data: Buffer.from('{}') });
    expect(a.status).toBe(415);
    expect(lean.handler.heads).toEqual([]);
    await expectStillServing(lean);
  });

  it('grpc-timeout is honoured: DEADLINE_EXCEEDED when it passes, the exchange aborted; a malformed one is INTERNAL', async () => {
    lean.handler.reset(() => ({}));
    const started = Date.now();
    const a = await raw(lean.server.port, { headers: { 'grpc-timeout': '300m' }, data: frame(HEADERS_MESSAGE), end: false });
    expect(a.grpcStatus).toBe(String(grpc.status.DEADLINE_EXCEEDED));
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    await eventually(() => lean.handler.exchanges[0]?.aborts.length === 1, 'exchange aborted');
    const bad = await raw(lean.server.port, { headers: { 'grpc-timeout': '5 seconds' }, data: frame(HEADERS_MESSAGE) });
    expect(bad.grpcStatus).toBe(String(grpc.status.INTERNAL));
  });
});

describe('grpc-js still serves every other stream on the same port', () => {
  it('grpc.health.v1 Check, and UNIMPLEMENTED for a method nobody registered', async () => {
    expect(await health(lean.server.port)).toBe('SERVING');
    const a = await raw(lean.server.port, {
      path: '/envoy.service.ext_proc.v3.ExternalProcessor/NoSuchMethod',
      data: frame(Buffer.alloc(0)),
    });
    expect(a.grpcStatus).toBe(String(grpc.status.UNIMPLEMENTED));
  });

  describe('over TLS', () => {
    let pki: TestPki;
    let tls: Served;
    beforeAll(async () => {
      pki = makeTestPki();
      const credentials = grpc.ServerCredentials.createSsl(null, [
        { cert_chain: pki.read(pki.serverCert), private_key: pki.read(pki.serverKey) },
      ]);
      tls = await serve({ credentials }, grpc.credentials.createSsl(pki.read(pki.caCert)));
    });
    afterAll(async () => {
      await tls?.close();
      pki?.remove();
    });

    it('Process goes through the lean transport and Check through grpc-js, on one TLS port', async () => {
      expect(tls.server.transport).toBe('lean');
      tls.handler.reset(() => ({ decide: (b) => forward({ body: Buffer.concat([b, b]) }) }));
      const st = tls.client.open();
      st.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
      st.sendBody(Buffer.from('{"n":1}'), true);
      expect((await st.next()).response).toBe('request_headers');
      expect((await st.next()).request_body!.response!.body_mutation!.streamed_response!.body.toString()).toBe('{"n":1}{"n":1}');
      st.end();
      expect((await st.status).code).toBe(grpc.status.OK);
      expect(await health(tls.server.port, grpc.credentials.createSsl(pki.read(pki.caCert)))).toBe('SERVING');
    });
  });
});

describe('shutdown reaches the lean calls (grpc-js does not track them)', () => {
  async function openMidBody(s: Served): Promise<{ stream: EnvoyStream; aborted: Promise<string> }> {
    s.handler.reset(() => ({}));
    const stream = s.client.open();
    stream.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    stream.sendBody(Buffer.from('{'), false);
    const ex = await s.handler.firstExchange();
    return { stream, aborted: ex.aborted.promise };
  }

  it('forceShutdown cancels an open call: its exchange is aborted', async () => {
    const s = await serve();
    try {
      const { stream, aborted } = await openMidBody(s);
      s.server.forceShutdown();
      await aborted;
      expect((await stream.status).code).not.toBe(grpc.status.OK);
      expect(s.server.activeStreams()).toBe(0);
    } finally {
      s.client.close();
    }
  });

  it('drain refuses new calls UNAVAILABLE while health answers, then cancels what is left', async () => {
    const s = await serve();
    try {
      const { aborted } = await openMidBody(s);
      const drained = s.server.drain(400);
      const late = s.client.open();
      late.sendHeaders(chatHeaders(), { endOfStream: true });
      expect((await late.status).code).toBe(grpc.status.UNAVAILABLE);
      expect(await health(s.server.port)).toBe('SERVING');
      expect(await drained).toBe(1);
      await aborted;
      expect(s.server.activeStreams()).toBe(0);
    } finally {
      s.client.close();
    }
  });

  it('a graceful shutdown waits for an open call to finish', async () => {
    const s = await serve();
    try {
      const { stream } = await openMidBody(s);
      let closed = false;
      const shut = s.server.shutdown(5000).then(() => (closed = true));
      await new Promise((r) => setTimeout(r, 100));
      expect(closed).toBe(false);
      stream.sendBody(Buffer.from('}'), true);
      await stream.next();
      await stream.next();
      stream.end();
      expect((await stream.status).code).toBe(grpc.status.OK);
      await shut;
      expect(s.handler.exchanges[0]!.aborts).toEqual([]);
    } finally {
      s.client.close();
    }
  });
});
