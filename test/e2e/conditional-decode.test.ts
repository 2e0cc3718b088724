/**
 * Issue #4 acceptance through the real Envoy: the conditional-decode probe (render ->
 * conditional-decode -> prefill -> decode), with the decode simulator standing in for the EPP's
 * 412 gate. A miss runs the cascade; a hit is served by the probe alone and, in full-duplex mode,
 * streamed back through a streamed immediate response as the worker produces it.
 */
import { Agent, request } from 'undici';
import type { RecordedRequest } from '../../sim/simulator';
import { at, sseData, TestClient } from '../../launch/client';
import { startStack, type Stack, type StepYaml } from '../support/stack';

const MODEL = 'sim-model';
let seq = 0;
const nextId = (): string => `cd-${process.pid}-${Date.now()}-${++seq}`;

const conditionalSteps = (urls: { render: string }): StepYaml[] => [
  { type: 'render', params: { address: urls.render, timeout: '30s' } },
  { type: 'conditional-decode' },
  { type: 'prefill' },
  { type: 'decode' },
];

const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: MODEL, messages: [{ role: 'user', content }], ...extra });
const isProbe = (r: RecordedRequest): boolean => r.headers['prefer'] === 'if-available';

interface TimedRead {
  readonly at: number;
  readonly text: string;
}

/** POSTs and reads the answer piece by piece, noting when each piece arrived at the client. */
async function timedPost(
  agent: Agent,
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
  stopAfterFirstRead = false,
): Promise<{ status: number; headers: Record<string, string>; start: number; reads: TimedRead[] }> {
  const start = Date.now();
  const res = await request(url, {
    method: 'POST',
    dispatcher: agent,
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const reads: TimedRead[] = [];
  for await (const chunk of res.body) {
    reads.push({ at: Date.now(), text: (chunk as Buffer).toString('utf8') });
    if (stopAfterFirstRead) {
      res.body.destroy(); // the client goes away mid-answer
      break;
    }
  }
  const flat: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') flat[k] = v;
  return { status: res.statusCode, headers: flat, start, reads };
}

describe('conditional decode through Envoy (full_duplex)', () => {
  let stack: Stack;
  let client: TestClient;
  let agent: Agent;

  beforeAll(async () => {
    stack = await startStack({
      bodyMode: 'full_duplex',
      steps: conditionalSteps,
      simulator: { honourPreferIfAvailable: true, interTokenLatencyMs: 5 },
    });
    client = new TestClient(stack.publicUrl);
    agent = new Agent({ keepAliveTimeout: 5_000 });
  });
  afterAll(async () => {
    await client?.close();
    await agent?.close();
    await stack?.close();
  });
  beforeEach(() => {
    stack.reset();
    stack.sims.decode.forgetPrefixes();
  });

  it('miss: 412 from the stand-in, the cascade runs, decode goes through Envoy; the same prompt again is a hit', async () => {
    const body = chat('the first time this prompt is seen', { max_tokens: 50 });
    const missId = nextId();
    const miss = await client.post('/v1/chat/completions', body, { headers: { 'x-request-id': missId } });
    expect(miss.status).toBe(200);
    expect(at(miss.json, 'choices', 0, 'message', 'content')).toBe('the first time this prompt is seen');

    const [probe, decode] = stack.sims.decode.requests;
    expect(stack.sims.decode.requests).toHaveLength(2);
    expect(isProbe(probe!)).toBe(true);
    expect(probe!.status).toBe(412);
    expect(probe!.headers['epp-profile']).toBe('decode');
    expect(probe!.headers['x-request-id']).toBe(missId);
    expect((at(probe!.json, 'tokens', 'token_ids') as number[]).length).toBeGreaterThan(1);
    expect(stack.sims.prefill.requests).toHaveLength(1); // the cascade ran
    expect(isProbe(decode!)).toBe(false);
    expect(decode!.status).toBe(200);
    expect(at(decode!.json, 'kv_transfer_params')).toBeDefined();
    const missLog = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === missId);
    expect(missLog.path_taken).toBe('cascade');
    expect(missLog.upstream_cluster).toBe('decode_workers');
    const probeLog = await stack.accessLog.waitFor((e) => e.listener === 'gateway' && e.x_request_id === missId && e.response_code === 412);
    expect(probeLog.epp_profile).toBe('decode');

    stack.reset();
    const hitId = nextId();
    const hit = await client.post('/v1/chat/completions', body, { headers: { 'x-request-id': hitId } });
    expect(hit.status).toBe(200);
    expect(hit.json).toMatchObject({ choices: [{ message: { content: 'the first time this prompt is seen' } }] });
    expect(hit.headers['x-inference-pod']).toBe('sim-decode-0');
    expect(stack.sims.prefill.requests).toHaveLength(0); // no cascade
    expect(stack.sims.decode.requests).toHaveLength(1);
    expect(isProbe(stack.sims.decode.requests[0]!)).toBe(true);
    expect(stack.sims.decode.requests[0]!.status).toBe(200);
    const hitLog = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === hitId);
    expect(hitLog.path_taken).toBe('cache_hit');
    expect(hitLog.response_code).toBe(200);
    expect(hitLog.request_id).toBe(hitId);
  });

  it('streaming hit: text/event-stream, every chunk and [DONE], served by the probe alone', async () => {
    const text = 'stream this cached answer back';
    await client.post('/v1/chat/completions', chat(text)); // warms the prefix (a miss)
    stack.reset();
    const res = await client.post('/v1/chat/completions', chat(text, { stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/event-stream/);
    const data = sseData(res.text);
    expect(data[data.length - 1]).toBe('[DONE]');
    const content = data
      .slice(0, -1)
      .map((d) => (at(JSON.parse(d), 'choices', 0, 'delta', 'content') as string | undefined) ?? '')
      .join('');
    expect(content).toBe(text);
    expect(stack.sims.prefill.requests).toHaveLength(0);
    expect(stack.sims.decode.requests.map(isProbe)).toEqual([true]);
  });

  it('streaming hit from a slow worker (1 s between chunks): the first chunk reaches the client long before the last', async () => {
    const text = 'slow cached words arrive';
    await client.post('/v1/chat/completions', chat(text));
    stack.reset();
    stack.sims.decode.setFaults([{ match: { profile: 'decode' }, chunkDelayMs: 1000, times: 1 }]);
    const res = await timedPost(agent, `${stack.publicUrl}/v1/chat/completions`, chat(text, { stream: true }));
    expect(res.status).toBe(200);
    const withData = res.reads.filter((r) => r.text.includes('data:'));
    expect(withData.length).toBeGreaterThanOrEqual(3);
    const first = withData[0]!.at;
    const last = withData[withData.length - 1]!.at;
    // 4 words + finish + [DONE] = 6 frames, 5 s apart in total: a buffered relay would deliver
    // everything at once at the end.
    expect(first).toBeLessThan(last - 1500);
    expect(res.reads.map((r) => r.text).join('')).toContain('data: [DONE]');
    expect(stack.sims.prefill.requests).toHaveLength(0);
  }, 20_000);

  it('a non-412 error from the probe reaches the client with its status and body; no cascade', async () => {
    const id = nextId();
    stack.sims.decode.setFaults([
      { match: { profile: 'decode' }, status: 503, body: '{"error":{"message":"decode pool overloaded"}}', times: 1 },
    ]);
    const res = await client.post('/v1/chat/completions', chat('any prompt at all'), { headers: { 'x-request-id': id } });
    expect(res.status).toBe(503);
    expect(res.json).toEqual({ error: { message: 'decode pool overloaded' } });
    expect(stack.sims.prefill.requests).toHaveLength(0);
    expect(stack.sims.decode.requests).toHaveLength(1);
    const log = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
    expect(log.path_taken).toBe('cache_hit');
    expect(log.response_code).toBe(503);
  });

  it('a client that disconnects during a streamed hit closes the worker connection', async () => {
    const text = 'the client will leave early';
    await client.post('/v1/chat/completions', chat(text));
    stack.reset();
    stack.sims.decode.setFaults([{ match: { profile: 'decode' }, chunkDelayMs: 1000, times: 1 }]);
    const started = Date.now();
    const res = await timedPost(agent, `${stack.publicUrl}/v1/chat/completions`, chat(text, { stream: true }), {}, true);
    expect(res.status).toBe(200);
    expect(res.reads).toHaveLength(1);
    const closed = await stack.sims.decode.waitForClose(isProbe, 5000);
    expect(closed.status).toBe(200);
    // Closed long before the worker would have finished (5 frames x 1 s to go).
    expect(Date.now() - started).toBeLessThan(4000);
  });
});

describe('conditional decode through Envoy (buffered)', () => {
  let stack: Stack;
  let client: TestClient;
  let agent: Agent;

  beforeAll(async () => {
    stack = await startStack({ bodyMode: 'buffered', steps: conditionalSteps, simulator: { honourPreferIfAvailable: true } });
    client = new TestClient(stack.publicUrl);
    agent = new Agent({ keepAliveTimeout: 5_000 });
  });
  afterAll(async () => {
    await client?.close();
    await agent?.close();
    await stack?.close();
  });

  it('miss runs the cascade; the streaming hit is answered in one piece (no incremental delivery)', async () => {
    const text = 'buffered mode collects the hit';
    const miss = await client.post('/v1/chat/completions', chat(text));
    expect(miss.status).toBe(200);
    expect(stack.sims.prefill.requests).toHaveLength(1);
    stack.reset();

    stack.sims.decode.setFaults([{ match: { profile: 'decode' }, chunkDelayMs: 400, times: 1 }]);
    const res = await timedPost(agent, `${stack.publicUrl}/v1/chat/completions`, chat(text, { stream: true }));
    expect(res.status).toBe(200);
    const body = res.reads.map((r) => r.text).join('');
    expect(sseData(body).pop()).toBe('[DONE]');
    // An immediate response: Envoy knows the length up front, and nothing arrived before the
    // worker had written its last frame (6 frames, 400 ms apart).
    expect(res.headers['content-length']).toBe(String(Buffer.byteLength(body)));
    expect(res.reads[0]!.at - res.start).toBeGreaterThan(1500);
    expect(stack.sims.prefill.requests).toHaveLength(0);
  }, 20_000);
});
