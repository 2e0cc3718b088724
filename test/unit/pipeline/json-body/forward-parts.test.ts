/**
 * A forward body in parts through the ext_proc protocol: streamed part by part in <= 64 KiB chunks
 * (full duplex), one message with an exact content-length (buffered), and a pipeline that parses a
 * chunked body and forwards its big string untouched.
 */
import { randomBytes } from 'node:crypto';
import { startExtProcServer, STREAMED_CHUNK_BYTES, type ExtProcServer } from '../../../../src/extproc';
import { streamedBodyChunks } from '../../../../src/extproc/responses';
import { PipelineHandler } from '../../../../src/pipeline/handler';
import type { Step } from '../../../../src/pipeline/step';
import { silentLogger } from '../../../../src/observability/logger';
import { EnvoyClient, headerEntries, type EnvoyStream, type ProcessingResponseMsg } from '../../../protocol/envoy-client';
import { forward } from '../../../protocol/fake-handler';
import { chatHeaders, startHarness, type Harness } from '../../../protocol/harness';

function streamedChunk(msg: ProcessingResponseMsg): { body: Buffer; end_of_stream: boolean } {
  expect(msg.response).toBe('request_body');
  const mutation = msg.request_body!.response!.body_mutation!;
  expect(mutation.mutation).toBe('streamed_response');
  return mutation.streamed_response!;
}

async function readStreamedBody(s: EnvoyStream): Promise<Array<{ body: Buffer; end_of_stream: boolean }>> {
  const chunks: Array<{ body: Buffer; end_of_stream: boolean }> = [];
  for (;;) {
    const c = streamedChunk(await s.next());
    chunks.push(c);
    if (c.end_of_stream) return chunks;
  }
}

const parts = [randomBytes(100), randomBytes(150_000), randomBytes(10), Buffer.alloc(0), randomBytes(70_000), Buffer.alloc(0)];
const whole = Buffer.concat(parts);

describe('streamedBodyChunks', () => {
  const K = STREAMED_CHUNK_BYTES;

  it('slices large parts in place and joins runs of small ones, each message at most 64 KiB', () => {
    const big = randomBytes(3 * K + 5);
    const small = Array.from({ length: 5 }, () => randomBytes(20 * 1024));
    const chunks = streamedBodyChunks([randomBytes(300), big, ...small, randomBytes(1000)]);
    expect(chunks.map((c) => c.length)).toEqual([300, K, K, K, 5, 3 * 20 * 1024, 2 * 20 * 1024 + 1000]);
    // The large part goes out as views of itself, not copies.
    expect(chunks.slice(1, 5).every((c) => c.buffer === big.buffer)).toBe(true);
    expect(Buffer.concat(chunks).equals(Buffer.concat([chunks[0]!, big, ...small, chunks[6]!.subarray(2 * 20 * 1024)]))).toBe(true);
  });

  it('treats a single buffer as one part, and an empty body as no message', () => {
    const one = randomBytes(2 * K + 1);
    expect(streamedBodyChunks(one).map((c) => c.length)).toEqual([K, K, 1]);
    expect(streamedBodyChunks(Buffer.from('{}')).map(String)).toEqual(['{}']);
    expect(streamedBodyChunks([Buffer.alloc(0), Buffer.alloc(0)])).toEqual([]);
  });
});

describe('a forward body in parts', () => {
  let fd: Harness;
  let buffered: Harness;
  beforeAll(async () => {
    fd = await startHarness('full_duplex');
    buffered = await startHarness('buffered');
  });
  afterAll(async () => {
    await fd.close();
    await buffered.close();
  });

  it('FULL_DUPLEX_STREAMED: streams the parts in <= 64 KiB chunks, the large ones sliced in place', async () => {
    fd.handler.reset(() => ({ decide: () => forward({ body: parts }) }));
    const s = fd.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    s.sendBody(Buffer.from('{}'), true);
    expect((await s.next()).response).toBe('request_headers');
    const chunks = await readStreamedBody(s);
    const K = STREAMED_CHUNK_BYTES;
    expect(chunks.map((c) => c.body.length)).toEqual([100, K, K, 150_000 - 2 * K, 10, K, 70_000 - K]);
    expect(chunks.map((c) => c.end_of_stream)).toEqual([false, false, false, false, false, false, true]);
    expect(Buffer.concat(chunks.map((c) => c.body)).equals(whole)).toBe(true);
    s.end();
    await s.status;
  });

  it('BUFFERED: one body mutation holding every part, with its exact content-length', async () => {
    buffered.handler.reset(() => ({ decide: () => forward({ body: parts, setHeaders: { 'epp-profile': 'decode' } }) }));
    const s = buffered.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    expect((await s.next()).response).toBe('request_headers');
    s.sendBody(Buffer.from('{}'), true);
    const common = (await s.next()).request_body!.response!;
    expect(headerEntries(common.header_mutation)).toEqual({ 'epp-profile': 'decode', 'content-length': String(whole.length) });
    expect(common.body_mutation!.body!.equals(whole)).toBe(true);
    s.end();
    await s.status;
  });
});

describe('a chunked body through the pipeline', () => {
  let server: ExtProcServer;
  let client: EnvoyClient;
  const decodeLike: Step = {
    type: 'decode-like',
    async execute(ctx) {
      ctx.body['kv_transfer_params'] = { do_remote_prefill: true };
      ctx.decode = { headers: { 'epp-profile': 'decode' } };
    },
  };

  beforeAll(async () => {
    server = await startExtProcServer({
      address: '127.0.0.1:0',
      handler: new PipelineHandler({ steps: [decodeLike], maxBodyBytes: 64 * 1024 * 1024, log: silentLogger() }),
      maxBodyBytes: 64 * 1024 * 1024,
      metadataNamespace: 'epd.coordinator',
      fallbackBodyMode: 'full_duplex',
      log: silentLogger(),
    });
    client = new EnvoyClient(server.port);
  });
  afterAll(async () => {
    client.close();
    await server.shutdown(1000);
  });

  it('forwards the rewritten body with the big string exactly as the client streamed it', async () => {
    const kw = randomBytes(200_000).toString('base64');
    const body = { model: 'm', token_ids: [1, 2, 3], features: { kwargs_data: { image: [kw] } } };
    const raw = Buffer.from(JSON.stringify(body));
    const s = client.open();
    s.sendHeaders(
      [
        [':method', 'POST'],
        [':path', '/inference/v1/generate'],
        ['content-type', 'application/json'],
      ],
      { requestBodyMode: 'FULL_DUPLEX_STREAMED' },
    );
    expect(s.sendBodyChunks(raw, 16 * 1024, true)).toBeGreaterThan(10);
    const head = await s.next();
    expect(head.response).toBe('request_headers');
    expect(headerEntries(head.request_headers!.response!.header_mutation)).toEqual({ 'epp-profile': 'decode' });
    const chunks = await readStreamedBody(s);
    for (const c of chunks) expect(c.body.length).toBeLessThanOrEqual(STREAMED_CHUNK_BYTES);
    const out = Buffer.concat(chunks.map((c) => c.body));
    expect(out.toString()).toBe(JSON.stringify({ ...body, kv_transfer_params: { do_remote_prefill: true } }));
    s.end();
    await s.status;
  });
});
