/**
 * A `respond` decision with a streamed body (a conditional-decode hit) in FULL_DUPLEX_STREAMED mode:
 * one streamed_immediate_response, headers first, then each chunk as it arrives, with write
 * backpressure and an abort of the exchange when Envoy goes away mid-relay.
 */
import { startExtProcServer, STREAMED_CHUNK_BYTES, type ExtProcServer } from '../../src/extproc';
import { silentLogger } from '../../src/observability/logger';
import { EnvoyClient, headerEntries, structToJson, type EnvoyStream, type ProcessingResponseMsg } from './envoy-client';
import { deferred, eventually, respond, ScriptedHandler, type RecordingExchange } from './fake-handler';
import { chatHeaders, NS, patternBytes, startHarness, type Harness } from './harness';

let h: Harness;
beforeAll(async () => {
  h = await startHarness('full_duplex');
});
afterAll(async () => {
  await h.close();
});
beforeEach(() => h.handler.reset());

type Sir = NonNullable<ProcessingResponseMsg['streamed_immediate_response']>;

function sir(msg: ProcessingResponseMsg): Sir {
  expect(msg.response).toBe('streamed_immediate_response');
  return msg.streamed_immediate_response!;
}

function streamedHeaders(msg: ProcessingResponseMsg): Record<string, string> {
  const m = sir(msg);
  expect(m.response).toBe('headers_response');
  expect(m.headers_response!.end_of_stream).toBe(false);
  const out: Record<string, string> = {};
  for (const h of m.headers_response!.headers!.headers) out[h.key] = h.raw_value.toString('latin1');
  return out;
}

function bodyChunk(msg: ProcessingResponseMsg): { body: Buffer; end_of_stream: boolean } {
  const m = sir(msg);
  expect(m.response).toBe('body_response');
  return { body: m.body_response!.body, end_of_stream: m.body_response!.end_of_stream };
}

/** Reads body messages up to the one with end_of_stream. */
async function readBody(s: EnvoyStream): Promise<Array<{ body: Buffer; end_of_stream: boolean }>> {
  const out: Array<{ body: Buffer; end_of_stream: boolean }> = [];
  for (;;) {
    const msg = await s.next();
    const c = bodyChunk(msg);
    expect(msg.dynamic_metadata).toBeNull(); // metadata rides on the headers message only
    out.push(c);
    if (c.end_of_stream) return out;
  }
}

function open(headers = chatHeaders()): EnvoyStream {
  const s = h.client.open();
  s.sendHeaders(headers, { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
  s.sendBody(Buffer.from('{"model":"m"}'), true);
  return s;
}

async function streamsClosed(): Promise<void> {
  await eventually(() => h.server.activeStreams() === 0, 'all Process streams closed');
}

describe('streamed_immediate_response: message sequence', () => {
  it('headers (status, sanitised headers, metadata) first, then <= 64 KiB chunks, end_of_stream last', async () => {
    const big = patternBytes(150_000);
    async function* source(): AsyncGenerator<Buffer> {
      yield Buffer.from('data: 1\n\n');
      yield big;
      yield Buffer.alloc(0);
      yield Buffer.from('data: [DONE]\n\n');
    }
    h.handler.reset(() => ({
      decide: () =>
        respond(
          200,
          {
            'content-type': 'text/event-stream',
            'x-inference-pod': 'decode-1',
            'content-length': '999',
            'transfer-encoding': 'chunked',
            connection: 'keep-alive',
            ':status': '500',
            'x-bad': 'line\nbreak',
          },
          source(),
          { path_taken: 'cache_hit', status: 200 },
        ),
    }));
    const s = open();
    const first = await s.next();
    expect(streamedHeaders(first)).toEqual({ ':status': '200', 'content-type': 'text/event-stream', 'x-inference-pod': 'decode-1' });
    expect(structToJson(first.dynamic_metadata)).toEqual({ [NS]: { path_taken: 'cache_hit', status: 200 } });

    const chunks = await readBody(s);
    for (const c of chunks) expect(c.body.length).toBeLessThanOrEqual(STREAMED_CHUNK_BYTES);
    expect(chunks.slice(0, -1).every((c) => !c.end_of_stream)).toBe(true);
    expect(chunks[chunks.length - 1]).toEqual({ body: Buffer.alloc(0), end_of_stream: true });
    const expected = Buffer.concat([Buffer.from('data: 1\n\n'), big, Buffer.from('data: [DONE]\n\n')]);
    expect(Buffer.concat(chunks.map((c) => c.body)).equals(expected)).toBe(true);
    // 1 small + 3 pieces of the big one + 1 small + the closing empty one.
    expect(chunks).toHaveLength(1 + Math.ceil(big.length / STREAMED_CHUNK_BYTES) + 1 + 1);

    s.end();
    expect(await s.rest()).toEqual([]);
    expect((await s.status).code).toBe(0);
    expect(h.handler.exchanges[0]!.aborts).toEqual([]);
  });

  it('each chunk goes out as soon as it arrives, before the next exists', async () => {
    const second = deferred<void>();
    async function* source(): AsyncGenerator<Buffer> {
      yield Buffer.from('first');
      await second.promise;
      yield Buffer.from('second');
    }
    h.handler.reset(() => ({ decide: () => respond(200, { 'content-type': 'text/plain' }, source()) }));
    const s = open();
    streamedHeaders(await s.next());
    expect(bodyChunk(await s.next())).toEqual({ body: Buffer.from('first'), end_of_stream: false });
    second.resolve();
    expect(bodyChunk(await s.next())).toEqual({ body: Buffer.from('second'), end_of_stream: false });
    expect(bodyChunk(await s.next())).toEqual({ body: Buffer.alloc(0), end_of_stream: true });
    s.end();
    await s.status;
  });

  it("passes any final status (418 is not in Envoy's enum but is fine as :status); 1xx becomes 502", async () => {
    for (const [status, expected] of [
      [418, '418'],
      [101, '502'],
    ] as const) {
      h.handler.reset(() => ({ decide: () => respond(status, {}, (async function* () {})()) }));
      const s = open();
      expect(streamedHeaders(await s.next())[':status']).toBe(expected);
      expect(await readBody(s)).toEqual([{ body: Buffer.alloc(0), end_of_stream: true }]);
      s.end();
      await s.status;
    }
  });

  it('a request without a body, and one ending in trailers, get the same streamed reply', async () => {
    async function* one(): AsyncGenerator<Buffer> {
      yield Buffer.from('x');
    }
    h.handler.reset(() => ({ decide: () => respond(200, {}, one()) }));
    const a = h.client.open();
    a.sendHeaders(chatHeaders(), { endOfStream: true, requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    streamedHeaders(await a.next());
    expect(Buffer.concat((await readBody(a)).map((c) => c.body)).toString()).toBe('x');
    a.end();
    await a.status;

    h.handler.reset(() => ({ decide: () => respond(200, {}, one()) }));
    const b = h.client.open();
    b.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    b.sendBody(Buffer.from('{}'), false);
    b.sendTrailers();
    streamedHeaders(await b.next());
    expect(Buffer.concat((await readBody(b)).map((c) => c.body)).toString()).toBe('x');
    b.end();
    expect(await b.rest()).toEqual([]);
  });

  it('a complete Buffer body is still one immediate_response', async () => {
    h.handler.reset(() => ({ decide: () => respond(503, { 'content-type': 'application/json' }, Buffer.from('{"e":1}')) }));
    const s = open();
    const msg = await s.next();
    expect(msg.response).toBe('immediate_response');
    expect(msg.immediate_response!.body.toString()).toBe('{"e":1}');
    s.end();
    await s.status;
  });
});

describe('streamed_immediate_response: backpressure', () => {
  it('pulls the source only as fast as Envoy reads', async () => {
    const total = 300; // 300 x 64 KiB = 18.75 MiB
    let pulled = 0;
    const piece = patternBytes(STREAMED_CHUNK_BYTES);
    async function* source(): AsyncGenerator<Buffer> {
      for (let i = 0; i < total; i++) {
        pulled++;
        yield piece;
      }
    }
    h.handler.reset(() => ({ decide: () => respond(200, {}, source()) }));
    const s = open();
    streamedHeaders(await s.next());
    s.pause();
    await new Promise((r) => setTimeout(r, 300));
    const whilePaused = pulled;
    await new Promise((r) => setTimeout(r, 200));
    expect(pulled).toBe(whilePaused); // stalled, not still reading
    expect(whilePaused).toBeLessThan(total / 2);

    s.resume();
    const chunks = await readBody(s);
    expect(pulled).toBe(total);
    const bytes = chunks.reduce((n, c) => n + c.body.length, 0);
    expect(bytes).toBe(total * STREAMED_CHUNK_BYTES);
    expect(chunks.slice(0, -1).every((c) => c.body.equals(piece))).toBe(true);
    s.end();
    await s.status;
  });
});

describe('streamed_immediate_response: Envoy goes away mid-relay', () => {
  /** A source like a real side call: it ends when the exchange is aborted. */
  function abortableSource(ex: () => RecordingExchange, started: { resolve(): void }, released: { value: boolean }) {
    return (async function* (): AsyncGenerator<Buffer> {
      try {
        yield Buffer.from('data: 1\n\n');
        started.resolve();
        await ex().aborted.promise;
        throw new Error('aborted');
      } finally {
        released.value = true;
      }
    })();
  }

  it.each(['cancel', 'half-close'] as const)('%s: the exchange is aborted exactly once and the source released', async (how) => {
    const started = deferred<void>();
    const released = { value: false };
    h.handler.reset(() => ({
      decide: () =>
        respond(
          200,
          {},
          abortableSource(() => h.handler.exchanges[0]!, started, released),
        ),
    }));
    const s = open();
    streamedHeaders(await s.next());
    expect(bodyChunk(await s.next()).body.toString()).toBe('data: 1\n\n');
    await started.promise;
    if (how === 'cancel') s.cancel();
    else s.end();
    const ex = await h.handler.firstExchange();
    await ex.aborted.promise;
    await streamsClosed();
    await eventually(() => released.value, 'source released');
    expect(ex.aborts).toHaveLength(1);
    if (how === 'half-close') expect((await s.status).code).toBe(0);
  });

  it('a source that never ends is abandoned at once (no wait for its next chunk)', async () => {
    const never = new Promise<never>(() => undefined);
    async function* source(): AsyncGenerator<Buffer> {
      yield Buffer.from('a');
      await never;
    }
    h.handler.reset(() => ({ decide: () => respond(200, {}, source()) }));
    const s = open();
    streamedHeaders(await s.next());
    bodyChunk(await s.next());
    s.cancel();
    const ex = await h.handler.firstExchange();
    await ex.aborted.promise;
    await streamsClosed();
    expect(ex.aborts).toHaveLength(1);
  });

  it('a source failing mid-body ends the call with INTERNAL (Envoy resets the client), no end_of_stream', async () => {
    async function* broken(): AsyncGenerator<Buffer> {
      yield Buffer.from('data: 1\n\n');
      throw new Error('upstream reset mid-body');
    }
    h.handler.reset(() => ({ decide: () => respond(200, { 'content-type': 'text/event-stream' }, broken()) }));
    const s = open();
    streamedHeaders(await s.next());
    expect(bodyChunk(await s.next())).toEqual({ body: Buffer.from('data: 1\n\n'), end_of_stream: false });
    expect(await s.rest()).toEqual([]);
    expect((await s.status).code).toBe(13);
    await streamsClosed();
  });
});

describe('collect-then-immediate_response fallbacks', () => {
  async function* sse(): AsyncGenerator<Buffer> {
    yield Buffer.from('data: a\n\n');
    yield Buffer.from('data: [DONE]\n\n');
  }

  it('BUFFERED: one immediate_response with the whole body (no incremental TTFT)', async () => {
    const buf = await startHarness('buffered');
    try {
      buf.handler.reset(() => ({ decide: () => respond(200, { 'content-type': 'text/event-stream' }, sse()) }));
      const s = buf.client.open();
      s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
      expect((await s.next()).response).toBe('request_headers');
      s.sendBody(Buffer.from('{}'), true);
      const msg = await s.next();
      expect(msg.response).toBe('immediate_response');
      expect(msg.immediate_response!.body.toString()).toBe('data: a\n\ndata: [DONE]\n\n');
      expect(headerEntries(msg.immediate_response!.headers)).toEqual({ 'content-type': 'text/event-stream' });
      s.end();
      await s.status;
    } finally {
      await buf.close();
    }
  });

  it('streamedResponses: false (Envoy 1.34-1.36): one immediate_response even in announced full duplex', async () => {
    const handler = new ScriptedHandler();
    const server: ExtProcServer = await startExtProcServer({
      address: '127.0.0.1:0',
      handler,
      maxBodyBytes: 1024 * 1024,
      metadataNamespace: NS,
      fallbackBodyMode: 'full_duplex',
      streamedResponses: false,
      log: silentLogger(),
    });
    const client = new EnvoyClient(server.port);
    try {
      handler.reset(() => ({ decide: () => respond(200, {}, sse()) }));
      const s = client.open();
      s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
      s.sendBody(Buffer.from('{}'), true);
      const msg = await s.next();
      expect(msg.response).toBe('immediate_response');
      expect(msg.immediate_response!.body.toString()).toBe('data: a\n\ndata: [DONE]\n\n');
      s.end();
      await s.status;
    } finally {
      client.close();
      await server.shutdown(1000);
    }
  });
});
