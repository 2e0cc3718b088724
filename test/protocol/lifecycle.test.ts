/** Stream lifecycle, body-mode selection, header decoding and failure handling. */
import { headerEntries, type EnvoyStream } from './envoy-client';
import { deferred, eventually, forward, respond, type RecordingExchange } from './fake-handler';
import type { Decision } from '../../src/pipeline/decision';
import { chatHeaders, expectStillServing, patternBytes, startHarness, type Harness } from './harness';

const INTERNAL_ERROR_BODY = '{"error":{"message":"internal error","type":"api_error","param":null,"code":500}}';

let fd: Harness; // fallback full_duplex
let buf: Harness; // fallback buffered
beforeAll(async () => {
  fd = await startHarness('full_duplex');
  buf = await startHarness('buffered');
});
afterAll(async () => {
  await fd.close();
  await buf.close();
});
beforeEach(() => {
  fd.handler.reset();
  buf.handler.reset();
});

async function streamsClosed(h: Harness): Promise<void> {
  await eventually(() => h.server.activeStreams() === 0, 'all Process streams closed');
}

describe('stream ends', () => {
  it('client cancel mid-body aborts the exchange once and leaves the server serving', async () => {
    fd.handler.reset(() => ({}));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(patternBytes(1000), false);
    const ex = await fd.handler.firstExchange();
    s.cancel();
    await ex.aborted.promise;
    await streamsClosed(fd);
    expect(ex.aborts).toHaveLength(1);
    expect(ex.bodies).toEqual([]);
    await expectStillServing(fd);
  });

  it('half-close mid-body aborts the exchange once and ends the call cleanly', async () => {
    fd.handler.reset(() => ({}));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(patternBytes(1000), false);
    const ex = await fd.handler.firstExchange();
    s.end();
    expect(await s.rest()).toEqual([]);
    expect((await s.status).code).toBe(0);
    await streamsClosed(fd);
    expect(ex.aborts).toHaveLength(1);
  });

  it('cancel while the decision is pending aborts once; the late decision is dropped', async () => {
    const gate = deferred<Decision>();
    buf.handler.reset(() => ({ decide: () => gate.promise }));
    const s = buf.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    await s.next();
    s.sendBody(Buffer.from('{}'), true);
    const ex = await buf.handler.firstExchange();
    await ex.completed.promise;
    s.cancel();
    await ex.aborted.promise;
    gate.resolve(forward({ body: Buffer.from('late') }));
    await streamsClosed(buf);
    expect(ex.aborts).toHaveLength(1);
    await expectStillServing(buf);
  });

  it('cancel while a respond body is still streaming aborts the exchange (its relay stops)', async () => {
    const started = deferred<void>();
    let relayStopped = false;
    fd.handler.reset(() => ({
      decide: () => {
        const ex = fd.handler.exchanges[0]!;
        async function* relay(): AsyncGenerator<Buffer> {
          try {
            yield Buffer.from('data: 1\n\n');
            started.resolve();
            await ex.aborted.promise; // a real relay ends when the exchange is aborted
          } finally {
            relayStopped = true;
          }
        }
        return respond(200, { 'content-type': 'text/event-stream' }, relay());
      },
    }));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(Buffer.from('{}'), true);
    await started.promise;
    s.cancel();
    const ex = await fd.handler.firstExchange();
    await ex.aborted.promise;
    await streamsClosed(fd);
    await eventually(() => relayStopped, 'relay stopped');
    expect(ex.aborts).toHaveLength(1);
  });

  it('a cancel after the answer was sent does not abort', async () => {
    fd.handler.reset(() => ({ decide: () => forward({ body: Buffer.from('x') }) }));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(Buffer.from('{}'), true);
    await s.next();
    expect((await s.next()).request_body!.response!.body_mutation!.streamed_response!.end_of_stream).toBe(true);
    const ex = await fd.handler.firstExchange();
    s.cancel();
    await streamsClosed(fd);
    expect(ex.aborts).toEqual([]);
  });

  it('many concurrent streams all complete and the active count returns to zero', async () => {
    fd.handler.reset(() => ({ decide: async (body) => forward({ body: Buffer.concat([body, body]) }) }));
    const runs = Array.from({ length: 20 }, async (_, i) => {
      const s = fd.client.open();
      const body = Buffer.from(`{"n":${i}}`);
      s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
      s.sendBody(body, true);
      expect((await s.next()).response).toBe('request_headers');
      const chunk = (await s.next()).request_body!.response!.body_mutation!.streamed_response!;
      expect(chunk.body.toString()).toBe(`${body}${body}`);
      s.end();
      return (await s.status).code;
    });
    expect(await Promise.all(runs)).toEqual(Array(20).fill(0));
    await streamsClosed(fd);
  });
});

describe('server-wide body limit', () => {
  let small: Harness;
  beforeAll(async () => {
    small = await startHarness('full_duplex', 100_000);
  });
  afterAll(async () => {
    await small.close();
  });

  it('caps what a FULL_DUPLEX exchange may accumulate, whatever the exchange allows', async () => {
    small.handler.reset(() => ({ maxBodyBytes: 64 * 1024 * 1024 }));
    const s = small.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(patternBytes(60_000), false);
    s.sendBody(patternBytes(60_000), false);
    expect((await s.next()).immediate_response!.status!.code).toBe('PayloadTooLarge');
    expect((await small.handler.firstExchange()).tooLargeCalls).toEqual([120_000]);
    s.end();
    await s.status;
  });
});

describe('body mode selection', () => {
  it('protocol_config FULL_DUPLEX_STREAMED wins over a buffered fallback (headers reply held)', async () => {
    buf.handler.reset(() => ({ decide: () => forward({ setHeaders: { 'x-a': '1' } }) }));
    const s = buf.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(Buffer.from('ab'), false);
    s.sendBody(Buffer.from('cd'), true);
    const first = await s.next();
    expect(headerEntries(first.request_headers!.response!.header_mutation)).toEqual({ 'x-a': '1' });
    expect((await s.next()).request_body!.response!.body_mutation!.streamed_response!.body.toString()).toBe('abcd');
    s.end();
    await s.status;
  });

  it('protocol_config BUFFERED wins over a full-duplex fallback (headers acknowledged at once)', async () => {
    fd.handler.reset(() => ({ decide: () => forward({ body: Buffer.from('new') }) }));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    const first = await s.next();
    expect(first.response).toBe('request_headers');
    expect(first.request_headers!.response).toBeNull();
    s.sendBody(Buffer.from('old'), true);
    expect((await s.next()).request_body!.response!.body_mutation!.body!.toString()).toBe('new');
    s.end();
    await s.status;
  });

  it('without protocol_config (Envoy < 1.34) the fallback mode is used', async () => {
    fd.handler.reset(() => ({}));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders());
    s.sendBody(Buffer.from('x'), true);
    expect((await s.next()).response).toBe('request_headers');
    expect((await s.next()).request_body!.response!.body_mutation!.mutation).toBe('streamed_response');
    s.end();
    await s.status;
  });

  it('STREAMED passes requests with a body through without consulting the handler', async () => {
    fd.handler.reset(() => ({}));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'STREAMED' });
    expect((await s.next()).request_headers!.response).toBeNull();
    s.sendBody(Buffer.from('a'), false);
    expect((await s.next()).request_body!.response).toBeNull();
    s.sendBody(Buffer.from('b'), true);
    expect((await s.next()).request_body!.response).toBeNull();
    s.end();
    await s.status;
    expect(fd.handler.heads).toEqual([]);
  });

  it('STREAMED still processes a request without a body', async () => {
    fd.handler.reset(() => ({ decide: () => respond(403, {}, Buffer.from('no')) }));
    const s = fd.client.open();
    s.sendHeaders(
      [
        [':method', 'GET'],
        [':path', '/x'],
      ],
      { endOfStream: true, requestBodyMode: 'STREAMED' },
    );
    expect((await s.next()).immediate_response!.status!.code).toBe('Forbidden');
    s.end();
    await s.status;
  });
});

describe('request head decoding', () => {
  it('reads raw_value, lower-cases names, keeps the first value (the later ones apart), takes pseudo-headers out', async () => {
    const s = fd.client.open();
    s.sendHeaders(
      [
        [':method', 'POST'],
        [':path', '/v1/completions?x=1'],
        [':authority', 'h'],
        ['X-Mixed-Case', 'first'],
        ['x-mixed-case', 'second'],
        ['x-bytes', 'caf\u00e9'], // one latin1 byte 0xe9, read back unchanged
      ],
      { requestBodyMode: 'FULL_DUPLEX_STREAMED' },
    );
    await s.next();
    expect(fd.handler.heads[0]).toEqual({
      method: 'POST',
      path: '/v1/completions?x=1',
      headers: { 'x-mixed-case': 'first', 'x-bytes': 'caf\u00e9' },
      // Envoy forwards every value of a repeated name, so the header policy sees them all.
      laterValues: { 'x-mixed-case': ['second'] },
    });
    s.end();
    await s.status;
  });

  it('treats hostile names like __proto__ and constructor as ordinary headers', async () => {
    const s = fd.client.open();
    s.sendHeaders(
      [
        [':method', 'POST'],
        [':path', '/p'],
        ['__proto__', 'x'],
        ['constructor', 'c'],
        ['tostring', 't'],
        ['constructor', 'again'],
      ],
      {
        requestBodyMode: 'FULL_DUPLEX_STREAMED',
      },
    );
    await s.next();
    const head = fd.handler.heads[0]!;
    expect(Object.getPrototypeOf(head.headers)).toBe(Object.prototype);
    expect(head.headers).toEqual({ constructor: 'c', tostring: 't' });
    // A repeated `constructor` is a later value like any other (it once hit Object's own property).
    expect({ ...head.laterValues }).toEqual({ constructor: ['again'] });
    s.end();
    await s.status;
  });

  it('falls back to value when raw_value is empty (older Envoy)', async () => {
    const s = fd.client.open();
    s.sendHeaders(
      [
        [':method', 'POST'],
        [':path', '/v1/chat/completions'],
        ['x-legacy', 'v'],
      ],
      {
        requestBodyMode: 'FULL_DUPLEX_STREAMED',
        legacyValues: true,
      },
    );
    await s.next();
    expect(fd.handler.heads[0]).toEqual({ method: 'POST', path: '/v1/chat/completions', headers: { 'x-legacy': 'v' } });
    s.end();
    await s.status;
  });

  it('drops header names and values Envoy would reject instead of failing the request', async () => {
    fd.handler.reset(() => ({
      decide: () =>
        forward({
          setHeaders: { good: 'ok', 'bad name': 'x', 'x-inject': 'a\r\nx-evil: 1', 'x-pad': '  padded\t' },
          removeHeaders: ['bad\nname', 'x-old'],
        }),
    }));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { endOfStream: true, requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    const mutation = (await s.next()).request_headers!.response!.header_mutation!;
    expect(headerEntries(mutation)).toEqual({ good: 'ok', 'x-pad': 'padded' });
    expect(mutation.remove_headers).toEqual(['x-old']);
    s.end();
    await s.status;
  });

  it('keeps hop-by-hop and length headers out of an immediate response', async () => {
    fd.handler.reset(() => ({
      decide: () =>
        respond(
          200,
          { 'content-type': 'text/plain', 'content-length': '999', connection: 'close', 'transfer-encoding': 'chunked' },
          Buffer.from('hi'),
        ),
    }));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { endOfStream: true, requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    expect(headerEntries((await s.next()).immediate_response!.headers)).toEqual({ 'content-type': 'text/plain' });
    s.end();
    await s.status;
  });
});

describe('failures become answers', () => {
  async function expectInternalError(s: EnvoyStream): Promise<void> {
    let msg = await s.next();
    while (msg.response === 'request_headers') msg = await s.next(); // BUFFERED acknowledges headers first
    expect(msg.response).toBe('immediate_response');
    const ir = msg.immediate_response!;
    expect(ir.status!.code).toBe('InternalServerError');
    expect(ir.body.toString()).toBe(INTERNAL_ERROR_BODY);
    expect(headerEntries(ir.headers)).toEqual({ 'content-type': 'application/json' });
    s.end();
    expect(await s.rest()).toEqual([]);
    expect((await s.status).code).toBe(0);
  }

  it('handler.begin throwing -> 500', async () => {
    fd.handler.reset(() => {
      throw new Error('boom');
    });
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    await expectInternalError(s);
  });

  it('exchange.complete rejecting -> 500, no abort', async () => {
    buf.handler.reset(() => ({ decide: () => Promise.reject(new Error('broken pipeline')) }));
    const s = buf.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    s.sendBody(Buffer.from('{}'), true);
    await expectInternalError(s);
    expect((await buf.handler.firstExchange()).aborts).toEqual([]);
  });

  // Collected (modes not announced). A relayed stream that throws: streamed-respond.test.ts.
  it('a respond body stream that throws while collected -> 500', async () => {
    async function* broken(): AsyncGenerator<Buffer> {
      yield Buffer.from('data: 1\n\n');
      throw new Error('upstream reset');
    }
    fd.handler.reset(() => ({ decide: () => respond(200, {}, broken()) }));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders());
    s.sendBody(Buffer.from('{}'), true);
    await expectInternalError(s);
  });

  it('tooLarge returning forward (nothing left to forward) -> 500', async () => {
    fd.handler.reset(() => ({ maxBodyBytes: 10, tooLarge: () => forward() }));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(patternBytes(11), false);
    await expectInternalError(s);
    const ex: RecordingExchange = await fd.handler.firstExchange();
    expect(ex.aborts).toEqual([]);
  });
});

describe('messages that are not ours', () => {
  it('answers response-path messages unchanged so a misconfigured filter never hangs', async () => {
    const s = buf.client.open();
    s.sendHeaders(chatHeaders(), { endOfStream: true, requestBodyMode: 'BUFFERED', responseBodyMode: 'BUFFERED' });
    expect((await s.next()).response).toBe('request_headers');
    s.sendResponseHeaders();
    s.sendResponseBody(Buffer.from('{"choices":[]}'), true);
    s.sendResponseTrailers();
    const kinds = [await s.next(), await s.next(), await s.next()];
    expect(kinds.map((m) => m.response)).toEqual(['response_headers', 'response_body', 'response_trailers']);
    expect(kinds[1]!.response_body!.response).toBeNull();
    s.end();
    await s.status;
  });

  it('echoes response body chunks when the response side is FULL_DUPLEX_STREAMED', async () => {
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { endOfStream: true, requestBodyMode: 'FULL_DUPLEX_STREAMED', responseBodyMode: 'FULL_DUPLEX_STREAMED' });
    await s.next();
    s.sendResponseHeaders();
    s.sendResponseBody(Buffer.from('data: x\n\n'), true);
    expect((await s.next()).response).toBe('response_headers');
    const chunk = (await s.next()).response_body!.response!.body_mutation!.streamed_response!;
    expect(chunk.body.toString()).toBe('data: x\n\n');
    expect(chunk.end_of_stream).toBe(true);
    s.end();
    await s.status;
  });
});
