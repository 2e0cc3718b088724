/**
 * Decode `force_stream` through the real Envoy, in both ext_proc body modes: a non-streaming
 * request runs upstream as a streaming one and the client gets the reassembled JSON; a streaming
 * request passes through untouched; and Envoy sends the service no response-phase message for any
 * request (its own ext_proc counters: only the request's headers and body are ever sent).
 */
import { httpGet } from '../../launch/envoy';
import { at, sseData, TestClient } from '../../launch/client';
import { waitUntil } from '../../launch/ports';
import { defaultSteps, startStack, type Stack } from '../support/stack';

const MODEL = 'sim-model';

function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (!(rest.startsWith('{') || rest.startsWith(' '))) continue;
    if (!Object.entries(labels).every(([k, v]) => rest.includes(`${k}="${v}"`))) continue;
    total += Number(line.split(' ').pop());
  }
  return total;
}

describe.each(['full_duplex', 'buffered'] as const)('force_stream through Envoy (%s)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;
  const metrics = async (): Promise<string> => (await httpGet(`http://127.0.0.1:${stack.service.metricsPort}/metrics`)).body;
  /** ext_proc messages of one kind the service received from Envoy so far. */
  const received = async (message: string): Promise<number> =>
    sample(await metrics(), 'epd_coordinator_extproc_messages_total', { message });
  /** Messages Envoy's own ext_proc filter sent the service so far (its counter, all kinds). */
  const sentByEnvoy = async (): Promise<number> => (await stack.envoy.stats('ext_proc'))['http.public.ext_proc.stream_msgs_sent'] ?? 0;

  beforeAll(async () => {
    stack = await startStack({
      bodyMode,
      simulator: { interTokenLatencyMs: 5 },
      steps: (urls) =>
        defaultSteps(urls).map((s) =>
          s.type === 'decode' ? { type: 'decode', params: { force_stream: true, force_stream_max_request_size: '64KiB' } } : s,
        ),
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it('chat, non-streaming: the worker streams, the client gets one JSON reply (incremental path)', async () => {
    const before = sample(await metrics(), 'llm_d_coordinator_force_stream_total', { result: 'forced' });
    const res = await client.post('/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'hello <world> "quoted" & more' }],
      max_tokens: 50,
    });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('application/json');
    expect(at(res.json, 'object')).toBe('chat.completion');
    expect(at(res.json, 'choices', 0, 'message')).toEqual({ role: 'assistant', content: 'hello <world> "quoted" & more' });
    expect(at(res.json, 'choices', 0, 'finish_reason')).toBe('stop');
    expect(typeof at(res.json, 'usage', 'completion_tokens')).toBe('number');
    const decode = stack.sims.decode.requests.filter((r) => r.path === '/v1/chat/completions');
    expect(decode).toHaveLength(1);
    expect(decode[0]!.json).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    expect(decode[0]!.headers['epp-profile']).toBe('decode');
    expect(sample(await metrics(), 'llm_d_coordinator_force_stream_total', { result: 'forced', model_name: MODEL }) - before).toBe(1);
  });

  it('completions, non-streaming: text reassembled', async () => {
    const res = await client.post('/v1/completions', { model: MODEL, prompt: [11, 22, 33, 44], max_tokens: 20 });
    expect(res.status).toBe(200);
    expect(at(res.json, 'object')).toBe('text_completion');
    expect(at(res.json, 'choices', 0, 'text')).toBe('11,22,33,44');
    expect(at(stack.sims.decode.requests.at(-1)!.json, 'stream')).toBe(true);
  });

  it('generate, non-streaming: the buffered path reserves, reassembles token ids and releases', async () => {
    const res = await client.post('/inference/v1/generate', {
      model: MODEL,
      token_ids: [5, 6, 7, 8],
      sampling_params: { max_tokens: 3, temperature: 0 },
    });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ prompt_logprobs: null, kv_transfer_params: null });
    expect(at(res.json, 'choices', 0, 'token_ids')).toEqual([5, 6, 7]);
    expect(res.json).not.toHaveProperty('object');
    const decode = stack.sims.decode.requests.filter((r) => r.path === '/inference/v1/generate');
    expect(at(decode[0]!.json, 'stream')).toBe(true);
    expect(decode[0]!.json).not.toHaveProperty('stream_options');
    expect(sample(await metrics(), 'llm_d_coordinator_force_stream_buffered_bytes')).toBe(0);
  });

  it('generate without a token limit passes through unforced (fallback_unbounded)', async () => {
    const before = sample(await metrics(), 'llm_d_coordinator_force_stream_total', { result: 'fallback_unbounded' });
    const res = await client.post('/inference/v1/generate', { model: MODEL, token_ids: [5, 6], sampling_params: { temperature: 0 } });
    expect(res.status).toBe(200);
    expect(at(stack.sims.decode.requests.at(-1)!.json, 'stream')).not.toBe(true);
    expect(sample(await metrics(), 'llm_d_coordinator_force_stream_total', { result: 'fallback_unbounded' }) - before).toBe(1);
  });

  it('a streaming client request is passed through untouched (SSE from the worker)', async () => {
    const res = await client.post('/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'stream me' }],
      max_tokens: 20,
      stream: true,
    });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toContain('text/event-stream');
    const data = sseData(res.text);
    expect(data.at(-1)).toBe('[DONE]');
    const decode = stack.sims.decode.requests.at(-1)!;
    expect(decode.json).toMatchObject({ stream: true });
    // Not ours to add: the client asked for no usage chunk.
    expect(decode.json).not.toHaveProperty('stream_options');
  });

  it('a worker error on the forced stream reaches the client with its status and body', async () => {
    stack.sims.decode.setFaults([{ match: { profile: 'decode' }, status: 503, body: '{"error":"boom"}', times: 1 }]);
    const res = await client.post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 5 });
    expect(res.status).toBe(503);
    expect(res.json).toEqual({ error: 'boom' });
  });

  it('the client going away mid-reply stops the forced stream to the worker', async () => {
    const abort = new AbortController();
    const pending = client.post(
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: Array.from({ length: 1000 }, (_, i) => `w${i}`).join(' ') }], max_tokens: 1000 },
      { signal: abort.signal },
    );
    const [leg] = await stack.sims.decode.waitForRequests(1, 10_000);
    abort.abort();
    await expect(pending).rejects.toThrow();
    // 1000 tokens at 5 ms each: the worker would still be generating had the side call not been cancelled.
    await waitUntil(() => leg!.closedEarly, 'the forced stream to the worker closed early', 4000);
    expect(leg!.status).toBe(200);
    await waitUntil(async () => sample(await metrics(), 'epd_coordinator_extproc_active_streams') === 0, 'streams closed', 10_000);
  });

  it('Envoy sends the service no response headers or body, forced or not', async () => {
    const requests: Array<[string, unknown]> = [
      ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'forced' }], max_tokens: 5 }],
      ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'streamed' }], max_tokens: 5, stream: true }],
      ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'lossy' }], max_tokens: 5, logprobs: true }],
      ['/inference/v1/generate', { model: MODEL, token_ids: [1, 2], sampling_params: { max_tokens: 2 } }],
    ];
    for (const [path, body] of requests) {
      const kinds = ['request_headers', 'request_body', 'response_headers', 'response_body', 'response_trailers'];
      const before = await Promise.all(kinds.map(received));
      const envoyBefore = await sentByEnvoy();
      const res = await client.post(path, body);
      expect(res.status).toBe(200);
      const after = await Promise.all(kinds.map(received));
      const delta = Object.fromEntries(kinds.map((k, i) => [k, after[i]! - before[i]!]));
      expect({ path, body, delta }).toEqual({
        path,
        body,
        delta: { request_headers: 1, request_body: expect.any(Number), response_headers: 0, response_body: 0, response_trailers: 0 },
      });
      expect(delta['request_body']).toBeGreaterThanOrEqual(1);
      // Envoy's own count agrees: everything it sent was request headers and body.
      expect((await sentByEnvoy()) - envoyBefore).toBe(delta['request_headers']! + delta['request_body']!);
    }
  });
});
