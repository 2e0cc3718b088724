/** FULL_DUPLEX_STREAMED: Envoy streams chunks without waiting; the headers reply is held. */
import { STREAMED_CHUNK_BYTES } from '../../src/extproc';
import { headerEntries, structToJson, type ProcessingResponseMsg } from './envoy-client';
import { eventually, forward, respond } from './fake-handler';
import { chatHeaders, NS, patternBytes, startHarness, type Harness } from './harness';

let h: Harness;
beforeAll(async () => {
  h = await startHarness('full_duplex');
});
afterAll(async () => {
  await h.close();
});
beforeEach(() => h.handler.reset());

function streamedChunk(msg: ProcessingResponseMsg): { body: Buffer; end_of_stream: boolean } {
  expect(msg.response).toBe('request_body');
  const mutation = msg.request_body!.response!.body_mutation!;
  expect(mutation.mutation).toBe('streamed_response');
  const { body, end_of_stream } = mutation.streamed_response!;
  return { body, end_of_stream };
}

/** Reads streamed body chunks until one has end_of_stream (or `count` chunks when given). */
async function readStreamedBody(s: { next(): Promise<ProcessingResponseMsg> }): Promise<Array<{ body: Buffer; end_of_stream: boolean }>> {
  const chunks: Array<{ body: Buffer; end_of_stream: boolean }> = [];
  for (;;) {
    const c = streamedChunk(await s.next());
    chunks.push(c);
    if (c.end_of_stream) return chunks;
  }
}

describe('FULL_DUPLEX_STREAMED forward', () => {
  it('answers headers only after the whole body, with mutations, then re-chunks the new body', async () => {
    const original = patternBytes(150_000);
    const newBody = patternBytes(200_000);
    h.handler.reset(() => ({
      decide: () =>
        forward({
          setHeaders: { 'epp-profile': 'decode', 'x-model': 'llama' },
          removeHeaders: ['x-drop-me'],
          body: newBody,
          metadata: { path: 'cascade', steps: [{ name: 'prefill', ms: 12.5 }], cache_hit: false, error: null },
        }),
    }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    const sentChunks = s.sendBodyChunks(original, 16 * 1024, true);
    expect(sentChunks).toBeGreaterThan(1);

    // The first answer must be the forward headers reply: nothing was answered before the body ended.
    const first = await s.next();
    expect(first.response).toBe('request_headers');
    const common = first.request_headers!.response!;
    expect(common.clear_route_cache).toBe(true);
    expect(headerEntries(common.header_mutation)).toEqual({ 'epp-profile': 'decode', 'x-model': 'llama' });
    expect(common.header_mutation!.remove_headers).toEqual(expect.arrayContaining(['x-drop-me', 'content-length']));
    for (const opt of common.header_mutation!.set_headers) {
      expect(opt.header!.value).toBe('');
      expect(opt.append).toBeNull();
      expect(opt.append_action).toBe('OVERWRITE_IF_EXISTS_OR_ADD');
    }
    expect(common.body_mutation).toBeNull();
    expect(structToJson(first.dynamic_metadata)).toEqual({
      [NS]: { path: 'cascade', steps: [{ name: 'prefill', ms: 12.5 }], cache_hit: false, error: null },
    });

    const chunks = await readStreamedBody(s);
    expect(chunks.length).toBe(Math.ceil(newBody.length / STREAMED_CHUNK_BYTES));
    for (const c of chunks) expect(c.body.length).toBeLessThanOrEqual(64 * 1024);
    expect(chunks.slice(0, -1).every((c) => !c.end_of_stream)).toBe(true);
    expect(Buffer.concat(chunks.map((c) => c.body)).equals(newBody)).toBe(true);

    const ex = h.handler.exchanges[0]!;
    expect(ex.bodies).toHaveLength(1);
    expect(ex.bodies[0]!.equals(original)).toBe(true);
    expect(h.handler.heads[0]).toEqual({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json', 'content-length': '1234', 'x-request-id': 'req-1' },
    });

    s.end();
    expect(await s.rest()).toEqual([]);
    expect((await s.status).code).toBe(0);
    expect(ex.aborts).toEqual([]);
  });

  it('streams the original bytes back when the decision keeps the body', async () => {
    const original = patternBytes(70_000);
    h.handler.reset(() => ({ decide: () => forward({ setHeaders: { 'epp-profile': 'decode' } }) }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBodyChunks(original, 10_000, true);
    expect((await s.next()).response).toBe('request_headers');
    const chunks = await readStreamedBody(s);
    expect(Buffer.concat(chunks.map((c) => c.body)).equals(original)).toBe(true);
    s.end();
    await s.status;
  });

  it('ends an empty new body with one empty end_of_stream chunk', async () => {
    h.handler.reset(() => ({ decide: () => forward({ body: Buffer.alloc(0) }) }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(Buffer.from('{"a":1}'), true);
    expect((await s.next()).response).toBe('request_headers');
    expect(streamedChunk(await s.next())).toEqual({ body: Buffer.alloc(0), end_of_stream: true });
    s.end();
    await s.status;
  });

  it('with trailers: no end_of_stream on body chunks, then a trailers reply', async () => {
    const newBody = patternBytes(100_000);
    h.handler.reset(() => ({ decide: () => forward({ body: newBody }) }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(Buffer.from('{"model":'), false);
    s.sendBody(Buffer.from('"m"}'), false);
    s.sendTrailers();
    expect((await s.next()).response).toBe('request_headers');
    const chunks: Buffer[] = [];
    let msg = await s.next();
    while (msg.response === 'request_body') {
      const c = streamedChunk(msg);
      expect(c.end_of_stream).toBe(false);
      chunks.push(c.body);
      msg = await s.next();
    }
    expect(msg.response).toBe('request_trailers');
    expect(msg.request_trailers!.header_mutation).toBeNull();
    expect(Buffer.concat(chunks).equals(newBody)).toBe(true);
    expect(h.handler.exchanges[0]!.bodies[0]!.toString()).toBe('{"model":"m"}');
    s.end();
    await s.status;
  });

  it('carries a 10 MiB body in many chunks both ways', async () => {
    const original = patternBytes(10 * 1024 * 1024);
    const newBody = patternBytes(10 * 1024 * 1024 + 333);
    h.handler.reset(() => ({ decide: () => forward({ body: newBody }) }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    expect(s.sendBodyChunks(original, 64 * 1024, true)).toBe(160);
    expect((await s.next()).response).toBe('request_headers');
    const chunks = await readStreamedBody(s);
    expect(chunks.length).toBe(Math.ceil(newBody.length / STREAMED_CHUNK_BYTES));
    expect(Buffer.concat(chunks.map((c) => c.body)).equals(newBody)).toBe(true);
    expect(h.handler.exchanges[0]!.bodies[0]!.equals(original)).toBe(true);
    s.end();
    await s.status;
  });
});

describe('FULL_DUPLEX_STREAMED respond', () => {
  it('answers with an immediate_response carrying status, headers, body and metadata', async () => {
    h.handler.reset(() => ({
      decide: () =>
        respond(422, { 'content-type': 'application/json', 'x-why': 'bad' }, Buffer.from('{"error":{}}'), { error_class: 'bad_request' }),
    }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(Buffer.from('{}'), true);
    const msg = await s.next();
    expect(msg.response).toBe('immediate_response');
    const ir = msg.immediate_response!;
    expect(ir.status!.code).toBe('UnprocessableEntity');
    expect(headerEntries(ir.headers)).toEqual({ 'content-type': 'application/json', 'x-why': 'bad' });
    expect(ir.body.toString()).toBe('{"error":{}}');
    expect(ir.details).toBe('epd_coordinator');
    expect(structToJson(msg.dynamic_metadata)).toEqual({ [NS]: { error_class: 'bad_request' } });
    s.end();
    expect(await s.rest()).toEqual([]);
  });

  // With announced modes a streamed body is relayed instead: see streamed-respond.test.ts.
  it('collects a streamed respond body into one immediate_response when Envoy does not announce its modes', async () => {
    async function* sse(): AsyncGenerator<Buffer> {
      yield Buffer.from('data: {"a":1}\n\n');
      await new Promise((r) => setImmediate(r));
      yield Buffer.from('data: [DONE]\n\n');
    }
    h.handler.reset(() => ({ decide: () => respond(200, { 'content-type': 'text/event-stream' }, sse()) }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders());
    s.sendBody(Buffer.from('{}'), true);
    const ir = (await s.next()).immediate_response!;
    expect(ir.status!.code).toBe('OK');
    expect(ir.body.toString()).toBe('data: {"a":1}\n\ndata: [DONE]\n\n');
    s.end();
    await s.status;
  });

  it('answers an oversized body with tooLarge() at once, without waiting for the end', async () => {
    h.handler.reset(() => ({ maxBodyBytes: 100_000 }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(patternBytes(64 * 1024), false);
    s.sendBody(patternBytes(64 * 1024), false); // 131072 > 100000; no end_of_stream sent yet
    const msg = await s.next();
    expect(msg.response).toBe('immediate_response');
    expect(msg.immediate_response!.status!.code).toBe('PayloadTooLarge');
    expect(structToJson(msg.dynamic_metadata)).toEqual({ [NS]: { error: 'too_large' } });
    const ex = h.handler.exchanges[0]!;
    expect(ex.tooLargeCalls).toEqual([131072]);
    // The rest of the body is ignored; the stream still ends cleanly.
    s.sendBody(patternBytes(64 * 1024), true);
    s.end();
    expect(await s.rest()).toEqual([]);
    expect((await s.status).code).toBe(0);
    expect(ex.bodies).toEqual([]);
    expect(ex.aborts).toEqual([]);
  });
});

describe('FULL_DUPLEX_STREAMED without a body or without an exchange', () => {
  it('processes a headers-only request at once and answers in the headers reply', async () => {
    h.handler.reset(() => ({ decide: () => forward({ setHeaders: { 'epp-profile': 'decode' }, metadata: { path: 'headers_only' } }) }));
    const s = h.client.open();
    s.sendHeaders(
      [
        [':method', 'GET'],
        [':path', '/v1/models'],
      ],
      { endOfStream: true, requestBodyMode: 'FULL_DUPLEX_STREAMED' },
    );
    const msg = await s.next();
    expect(msg.response).toBe('request_headers');
    expect(headerEntries(msg.request_headers!.response!.header_mutation)).toEqual({ 'epp-profile': 'decode' });
    expect(msg.request_headers!.response!.clear_route_cache).toBe(true);
    expect(structToJson(msg.dynamic_metadata)).toEqual({ [NS]: { path: 'headers_only' } });
    expect(h.handler.exchanges[0]!.bodies[0]!.length).toBe(0);
    s.end();
    expect(await s.rest()).toEqual([]); // no body chunks for a request without a body
  });

  it('passes through when the handler declines: empty headers reply, chunks echoed byte-exact', async () => {
    const a = patternBytes(1000);
    const b = patternBytes(70_000);
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(a, false);
    s.sendBody(Buffer.alloc(0), false);
    s.sendBody(b, false);
    s.sendTrailers();
    const headers = await s.next();
    expect(headers.response).toBe('request_headers');
    expect(headers.request_headers!.response).toBeNull();
    // Buffer.equals: jest's deep equality walks big buffers byte by byte, slowly.
    for (const sent of [a, Buffer.alloc(0), b]) {
      const echoed = streamedChunk(await s.next());
      expect(echoed.end_of_stream).toBe(false);
      expect(echoed.body.equals(sent)).toBe(true);
    }
    expect((await s.next()).response).toBe('request_trailers');
    s.end();
    expect(await s.rest()).toEqual([]);
    expect(h.handler.heads).toHaveLength(1);
  });

  it('preserves end_of_stream when echoing', async () => {
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(Buffer.from('last'), true);
    expect((await s.next()).response).toBe('request_headers');
    expect(streamedChunk(await s.next())).toEqual({ body: Buffer.from('last'), end_of_stream: true });
    s.end();
    await s.status;
    await eventually(() => h.server.activeStreams() === 0, 'streams closed');
  });
});
