/**
 * Issue #2 acceptance through the real Envoy: client -> Envoy (public listener) -> epd-coordinator
 * (ext_proc) -> render / prefill side calls (via Envoy's gateway listener) -> decode, in both
 * ext_proc body modes. The simulators record every leg as it reached them.
 */
import type { RecordedRequest } from '../../sim/simulator';
import { at, sseData, TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';

const MODEL = 'sim-model';
let seq = 0;
/** A fresh, valid request id per request, so legs and log lines can be matched to it. */
const nextId = (): string => `e2e-${process.pid}-${Date.now()}-${++seq}`;

const only = (reqs: RecordedRequest[], path?: string): RecordedRequest => {
  const hits = path ? reqs.filter((r) => r.path === path) : reqs;
  expect(hits).toHaveLength(1);
  return hits[0]!;
};

describe.each(['full_duplex', 'buffered'] as const)('cascade through Envoy (%s)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;

  beforeAll(async () => {
    stack = await startStack({
      bodyMode,
      kvConnector: 'kv-shared-storage',
      maxRequestBodyMb: 4,
      // Paces streamed tokens so SSE chunks reach the client as separate reads.
      simulator: { interTokenLatencyMs: 10 },
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it('chat, non-streaming: 200 with the echoed answer after render -> prefill -> decode', async () => {
    const id = nextId();
    const res = await client.post(
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: 'hello from the client' }], max_tokens: 50 },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'message', 'content')).toBe('hello from the client');
    expect(res.headers['x-inference-pod']).toBe('sim-decode-0');

    const render = only(stack.sims.render.requests, '/v1/chat/completions/render');
    const prefill = only(stack.sims.prefill.requests);
    const decode = only(stack.sims.decode.requests);
    expect(prefill.path).toBe('/v1/chat/completions');
    expect(decode.path).toBe('/v1/chat/completions');
    const tokenIds = at(prefill.json, 'tokens', 'token_ids') as number[];
    expect(tokenIds.length).toBeGreaterThan(1);
    expect(at(decode.json, 'tokens', 'token_ids')).toEqual(tokenIds);
    expect(at(render.json, 'messages')).toEqual([{ role: 'user', content: 'hello from the client' }]);
  });

  it('chat, streaming: SSE chunks arrive incrementally and end with [DONE]', async () => {
    const res = await client.post('/v1/chat/completions', {
      model: MODEL,
      stream: true,
      messages: [{ role: 'user', content: 'one two three four five six seven eight' }],
    });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/event-stream/);
    const data = sseData(res.text);
    expect(data[data.length - 1]).toBe('[DONE]');
    const content = data
      .slice(0, -1)
      .map((d) => (at(JSON.parse(d), 'choices', 0, 'delta', 'content') as string | undefined) ?? '')
      .join('');
    expect(content).toBe('one two three four five six seven eight');
    // More than one read carried data before the end: the stream was not buffered into one piece.
    const readsBeforeDone = res.reads.filter((r) => r.includes('data:') && !r.includes('[DONE]'));
    expect(readsBeforeDone.length).toBeGreaterThan(1);

    // Prefill ran non-streaming; decode kept the client's stream flag.
    expect(at(only(stack.sims.prefill.requests).json, 'stream')).toBe(false);
    expect(at(only(stack.sims.decode.requests).json, 'stream')).toBe(true);
  });

  it('prefill gets max_tokens 1 / stream false; decode keeps the client values, epp-profile decode and the request id', async () => {
    const id = nextId();
    const res = await client.post(
      '/v1/chat/completions',
      {
        model: MODEL,
        messages: [{ role: 'user', content: 'keep my sampling' }],
        max_tokens: 7,
        min_tokens: 2,
        stream: true,
        stream_options: { include_usage: true },
        temperature: 0.5,
      },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    const prefill = only(stack.sims.prefill.requests);
    expect(prefill.json).toMatchObject({ max_tokens: 1, stream: false });
    expect(prefill.json).not.toHaveProperty('min_tokens');
    expect(prefill.json).not.toHaveProperty('stream_options');
    expect(prefill.headers['epp-profile']).toBe('prefill');
    expect(prefill.headers['x-request-id']).toBe(id);

    const decode = only(stack.sims.decode.requests);
    expect(decode.json).toMatchObject({
      max_tokens: 7,
      min_tokens: 2,
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.5,
    });
    expect(decode.headers['epp-profile']).toBe('decode');
    expect(decode.headers['x-request-id']).toBe(id);
  });

  it('kv-shared-storage: the exact kv_transfer_params on the prefill and decode legs', async () => {
    const res = await client.post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'kv please' }] });
    expect(res.status).toBe(200);
    expect(at(only(stack.sims.prefill.requests).json, 'kv_transfer_params')).toEqual({ do_remote_decode: true, do_remote_prefill: false });
    expect(at(only(stack.sims.decode.requests).json, 'kv_transfer_params')).toEqual({ do_remote_decode: false, do_remote_prefill: true });
  });

  it('completions with a string prompt: render tokenizes it; prefill and decode get token ids', async () => {
    const id = nextId();
    const res = await client.post(
      '/v1/completions',
      { model: MODEL, prompt: 'a string prompt to render', max_tokens: 5 },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    const render = only(stack.sims.render.requests, '/v1/completions/render');
    expect(at(render.json, 'prompt')).toBe('a string prompt to render');
    const prefill = only(stack.sims.prefill.requests);
    const decode = only(stack.sims.decode.requests);
    expect(prefill.path).toBe('/v1/completions');
    const ids = at(prefill.json, 'prompt') as unknown[];
    expect(ids.length).toBeGreaterThan(1);
    expect(ids.every((t) => Number.isInteger(t))).toBe(true);
    expect(prefill.json).toMatchObject({ request_id: id, model: MODEL, max_tokens: 1, stream: false });
    expect(at(decode.json, 'prompt')).toEqual(ids);
    expect(at(decode.json, 'max_tokens')).toBe(5);
    // The echo simulator answers the token ids it was given, as llm-d-inference-sim does ("1,2,3").
    expect(at(res.json, 'choices', 0, 'text')).toBe(`${ids.slice(0, 5).join(',')},`);
  });

  it('completions with a token prompt: no render call', async () => {
    const res = await client.post('/v1/completions', { model: MODEL, prompt: [11, 22, 33, 44], max_tokens: 4 });
    expect(res.status).toBe(200);
    expect(stack.sims.render.requests).toHaveLength(0);
    expect(at(only(stack.sims.prefill.requests).json, 'prompt')).toEqual([11, 22, 33, 44]);
    expect(at(only(stack.sims.decode.requests).json, 'prompt')).toEqual([11, 22, 33, 44]);
    expect(at(res.json, 'choices', 0, 'text')).toBe('11,22,33,44');
  });

  it('generate: token_ids + sampling_params, transfer params in sampling_params.extra_args', async () => {
    const id = nextId();
    const res = await client.post(
      '/inference/v1/generate',
      { model: MODEL, token_ids: [5, 6, 7, 8], sampling_params: { max_tokens: 3, temperature: 0 } },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'token_ids')).toEqual([5, 6, 7]);
    expect(stack.sims.render.requests).toHaveLength(0);
    const prefill = only(stack.sims.prefill.requests, '/inference/v1/generate');
    expect(prefill.json).toEqual({
      request_id: id,
      model: MODEL,
      token_ids: [5, 6, 7, 8],
      sampling_params: { max_tokens: 1, extra_args: { kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false } } },
      stream: false,
    });
    const decode = only(stack.sims.decode.requests, '/inference/v1/generate');
    expect(at(decode.json, 'sampling_params')).toEqual({
      max_tokens: 3,
      temperature: 0,
      extra_args: { kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true } },
    });
    expect(decode.json).not.toHaveProperty('kv_transfer_params');
  });

  it("a body above Envoy's default 1 MiB buffer passes", async () => {
    const prompt = Array.from({ length: 300_000 }, (_, i) => (i % 50000) + 1);
    const body = JSON.stringify({ model: MODEL, prompt, max_tokens: 2 });
    expect(body.length).toBeGreaterThan(1024 * 1024);
    const res = await client.post('/v1/completions', body);
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'text')).toBe('1,2,');
    expect((at(only(stack.sims.decode.requests).json, 'prompt') as number[]).length).toBe(300_000);
  });

  it('invalid JSON: 400 with an OpenAI-style JSON error, no worker called', async () => {
    const res = await client.post('/v1/chat/completions', '{"model": "m", "messages": [');
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch(/application\/json/);
    expect(res.json).toMatchObject({ error: { type: 'invalid_request_error', code: 400 } });
    expect(typeof at(res.json, 'error', 'message')).toBe('string');
    expect(stack.sims.render.requests).toHaveLength(0);
    expect(stack.sims.prefill.requests).toHaveLength(0);
    expect(stack.sims.decode.requests).toHaveLength(0);
  });

  it('a body over server.max_request_body_size: 413, no worker called', async () => {
    const filler = 'x'.repeat(5 * 1024 * 1024);
    const res = await client.post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: filler }] });
    expect(res.status).toBe(413);
    expect(res.json).toMatchObject({ error: { code: 413 } });
    expect(stack.sims.prefill.requests).toHaveLength(0);
    expect(stack.sims.decode.requests).toHaveLength(0);
  });

  it('prefill 500: the client gets 502 without the upstream body text', async () => {
    stack.sims.prefill.setFaults([{ match: { profile: 'prefill' }, status: 500, body: 'SECRET-UPSTREAM-DETAIL stack trace' }]);
    const id = nextId();
    const res = await client.post(
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: 'fail please' }] },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(502);
    expect(res.text).not.toContain('SECRET');
    expect(res.json).toMatchObject({ error: { type: 'api_error', code: 502 } });
    expect(stack.sims.decode.requests).toHaveLength(0);
    const line = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
    expect(line).toMatchObject({
      response_code: 502,
      path_taken: 'error',
      error_step: 'prefill',
      error_class: 'upstream_5xx',
      upstream_status: 500,
    });
  });

  it('prefill 400: the client gets 400', async () => {
    stack.sims.prefill.setFaults([{ match: { profile: 'prefill' }, status: 400, body: 'SECRET bad field' }]);
    const res = await client.post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'reject me' }] });
    expect(res.status).toBe(400);
    expect(res.text).not.toContain('SECRET');
    expect(at(res.json, 'error', 'message')).toMatch(/prefill/);
    expect(stack.sims.decode.requests).toHaveLength(0);
  });

  it('a client disconnect during a slow prefill aborts the prefill side call', async () => {
    stack.sims.prefill.setFaults([{ match: { profile: 'prefill' }, hang: true }]);
    const ac = new AbortController();
    const pending = client
      .post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'slow' }] }, { signal: ac.signal })
      .then(
        () => 'answered',
        () => 'aborted',
      );
    await stack.sims.prefill.waitForRequests(1, 5000);
    ac.abort();
    expect(await pending).toBe('aborted');
    const closed = await stack.sims.prefill.waitForClose((r) => r.path === '/v1/chat/completions', 5000);
    expect(closed.closedEarly).toBe(true);
    expect(stack.sims.decode.requests).toHaveLength(0);
  });

  it('a spoofed client epp-profile never reaches a worker as sent; the pipeline still runs', async () => {
    const res = await client.post(
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: 'let me pick the pod' }] },
      { headers: { 'epp-profile': 'prefill', 'x-gateway-destination-endpoint': '127.0.0.1:1' } },
    );
    expect(res.status).toBe(200);
    const render = only(stack.sims.render.requests);
    const prefill = only(stack.sims.prefill.requests);
    const decode = only(stack.sims.decode.requests);
    expect(render.headers['epp-profile']).toBeUndefined();
    expect(prefill.headers['epp-profile']).toBe('prefill');
    expect(decode.headers['epp-profile']).toBe('decode');
    for (const leg of [render, prefill, decode]) expect(leg.headers['x-gateway-destination-endpoint']).toBeUndefined();
    expect(at(decode.json, 'kv_transfer_params')).toEqual({ do_remote_decode: false, do_remote_prefill: true });
  });

  it('the access log line shows the request id and step timings', async () => {
    const id = nextId();
    const res = await client.post(
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: 'log me' }] },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    const line = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
    expect(line).toMatchObject({
      request_id: id,
      path_taken: 'cascade',
      response_code: 200,
      epp_profile: 'decode',
      method: 'POST',
      path: '/v1/chat/completions',
    });
    expect(line.upstream_host).toBe(`127.0.0.1:${stack.sims.decode.port}`);
    expect(Object.keys(line.step_ms ?? {})).toEqual(expect.arrayContaining(['render', 'prefill', 'decode']));
    for (const ms of Object.values(line.step_ms ?? {})) expect(ms).toBeGreaterThanOrEqual(0);
    expect(line.steps).toMatch(/^render:[\d.]+,prefill:[\d.]+,decode:[\d.]+$/);
    expect(typeof line.token_count).toBe('number');
    // The side calls are logged by the gateway listener under the same id.
    const prefillLine = await stack.accessLog.waitFor(
      (e) => e.listener === 'gateway' && e.x_request_id === id && e.epp_profile === 'prefill',
    );
    expect(prefillLine).toMatchObject({ response_code: 200, upstream_host: `127.0.0.1:${stack.sims.prefill.port}` });
  });
});
