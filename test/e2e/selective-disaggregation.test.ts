/**
 * Selective disaggregation through the real Envoy (issue #15 item 7): prefill's
 * `min_prompt_tokens` and `fallback_to_decode`, the access-log field `disaggregation` and the
 * `epd_coordinator_disaggregation_total` metric. The EPP's "no prefill endpoint" answer comes from
 * the prefill simulator with the exact status, header and body the real EPP sends.
 */
import { at, TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';

const MODEL = 'sim-model';
const MIN_PROMPT_TOKENS = 32;
let seq = 0;
const nextId = (): string => `sel-${process.pid}-${Date.now()}-${++seq}`;

const SHORT = 'hello there';
const LONG = Array.from({ length: 60 }, (_, i) => `word${i}`).join(' ');
const NO_PREFILL_ENDPOINT = {
  match: { profile: 'prefill' },
  status: 429,
  headers: { 'x-llm-d-request-dropped-reason': 'rejected-saturated' },
  body: 'inference error: ResourceExhausted - no endpoints available for the given request',
};

async function disaggregationCounts(port: number): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^epd_coordinator_disaggregation_total\{path="([a-z_]+)"\} (\S+)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

describe.each(['full_duplex', 'buffered'] as const)('selective disaggregation through Envoy (%s)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;

  beforeAll(async () => {
    stack = await startStack({
      bodyMode,
      kvConnector: 'kv-nixl',
      steps: ({ render }) => [
        { type: 'render', params: { address: render, timeout: '30s' } },
        { type: 'prefill', params: { min_prompt_tokens: MIN_PROMPT_TOKENS, fallback_to_decode: true } },
        { type: 'decode' },
      ],
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  const chat = (content: string, id: string) =>
    client.post(
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content }], max_tokens: 10 },
      { headers: { 'x-request-id': id } },
    );
  const logged = (id: string) => stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);

  it('a short prompt skips prefill and decodes aggregated, without kv_transfer_params', async () => {
    const before = await disaggregationCounts(stack.service.metricsPort!);
    const id = nextId();
    const res = await chat(SHORT, id);
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'message', 'content')).toBe(SHORT);
    expect(stack.sims.prefill.requests).toHaveLength(0);
    const decode = stack.sims.decode.requests;
    expect(decode).toHaveLength(1);
    expect(decode[0]!.json).not.toHaveProperty('kv_transfer_params');
    const entry = await logged(id);
    expect(entry.disaggregation).toBe('aggregated_short_prompt');
    expect(entry.path_taken).toBe('cascade');
    expect(Number(entry.token_count)).toBeLessThan(MIN_PROMPT_TOKENS);
    const after = await disaggregationCounts(stack.service.metricsPort!);
    expect((after['aggregated_short_prompt'] ?? 0) - (before['aggregated_short_prompt'] ?? 0)).toBe(1);
  });

  it('a long prompt is disaggregated: prefill leg, then decode with the prefill KV params', async () => {
    const id = nextId();
    const res = await chat(LONG, id);
    expect(res.status).toBe(200);
    expect(stack.sims.prefill.requests).toHaveLength(1);
    expect(at(stack.sims.decode.requests[0]!.json, 'kv_transfer_params', 'do_remote_prefill')).toBe(true);
    const entry = await logged(id);
    expect(entry.disaggregation).toBe('disaggregated');
    expect(Number(entry.token_count)).toBeGreaterThanOrEqual(MIN_PROMPT_TOKENS);
  });

  it('no prefill endpoint (the EPP 429) falls back to aggregated decode', async () => {
    stack.sims.prefill.setFaults([NO_PREFILL_ENDPOINT]);
    const before = await disaggregationCounts(stack.service.metricsPort!);
    const id = nextId();
    const res = await chat(LONG, id);
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'message', 'content')).toMatch(/^word0 word1 /);
    expect(stack.sims.prefill.requests).toHaveLength(1);
    expect(stack.sims.decode.requests).toHaveLength(1);
    expect(stack.sims.decode.requests[0]!.json).not.toHaveProperty('kv_transfer_params');
    expect((await logged(id)).disaggregation).toBe('aggregated_fallback');
    const after = await disaggregationCounts(stack.service.metricsPort!);
    expect((after['aggregated_fallback'] ?? 0) - (before['aggregated_fallback'] ?? 0)).toBe(1);
  });

  it('saturated prefill pods (flow control 429) are passed on, not moved to decode', async () => {
    stack.sims.prefill.setFaults([{ ...NO_PREFILL_ENDPOINT, body: 'inference error: ResourceExhausted - queue at capacity' }]);
    const id = nextId();
    const res = await chat(LONG, id);
    expect(res.status).toBe(429);
    expect(res.text).not.toContain('queue at capacity');
    expect(stack.sims.decode.requests).toHaveLength(0);
    const entry = await logged(id);
    expect(entry.path_taken).toBe('error');
    expect(entry.error_step).toBe('prefill');
  });
});

describe('fallback_to_decode off (the default)', () => {
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startStack({ kvConnector: 'kv-nixl' });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });

  it('the EPP 429 for an empty prefill pool reaches the client, as upstream', async () => {
    stack.sims.prefill.setFaults([NO_PREFILL_ENDPOINT]);
    const res = await client.post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: SHORT }] });
    expect(res.status).toBe(429);
    expect(stack.sims.decode.requests).toHaveLength(0);
  });
});
