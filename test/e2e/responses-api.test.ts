/**
 * `POST /v1/responses` through the real Envoy (issue #15 item 2, reference §12.9): render ->
 * prefill -> decode with the Responses wire on every leg, streaming and not, and the same error
 * mapping as chat. The simulators answer the Responses API.
 */
import type { RecordedRequest } from '../../sim/simulator';
import { at, sseData, TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';

const MODEL = 'sim-model';
let seq = 0;
const nextId = (): string => `resp-e2e-${process.pid}-${Date.now()}-${++seq}`;
const only = (reqs: RecordedRequest[]): RecordedRequest => {
  expect(reqs).toHaveLength(1);
  return reqs[0]!;
};

describe.each(['full_duplex', 'buffered'] as const)('Responses API through Envoy (%s)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;

  beforeAll(async () => {
    stack = await startStack({ bodyMode, kvConnector: 'kv-nixl', simulator: { interTokenLatencyMs: 5 } });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it("non-streaming: render, prefill and decode legs on the Responses paths; the answer is the decode worker's", async () => {
    const id = nextId();
    const res = await client.post(
      '/v1/responses',
      {
        model: MODEL,
        input: [{ role: 'user', content: [{ type: 'input_text', text: 'hello responses api' }] }],
        max_output_tokens: 20,
        store: true,
      },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ object: 'response', status: 'completed' });
    expect(at(res.json, 'output', 0, 'content', 0, 'text')).toBe('hello responses api');

    expect(only(stack.sims.render.requests).path).toBe('/v1/responses/render');
    const prefill = only(stack.sims.prefill.requests);
    expect(prefill.path).toBe('/v1/responses');
    expect(prefill.headers['epp-profile']).toBe('prefill');
    expect(prefill.json).toMatchObject({
      max_output_tokens: 1,
      store: false,
      stream: false,
      kv_transfer_params: { do_remote_decode: true },
    });
    const decode = only(stack.sims.decode.requests);
    expect(decode.path).toBe('/v1/responses');
    expect(decode.json).toMatchObject({ max_output_tokens: 20, store: true, kv_transfer_params: { do_remote_prefill: true } });

    const line = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
    expect(line).toMatchObject({ path_taken: 'cascade', disaggregation: 'disaggregated' });
    expect(Number(line.token_count)).toBeGreaterThan(1);
  });

  it('streaming: Responses SSE events arrive incrementally through Envoy', async () => {
    const res = await client.post('/v1/responses', { model: MODEL, stream: true, input: 'one two three four five six' });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/event-stream/);
    const deltas = sseData(res.text)
      .filter((d) => d !== '[DONE]')
      .map((d) => JSON.parse(d) as { type: string; delta?: string })
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    expect(deltas).toBe('one two three four five six');
    expect(res.reads.filter((r) => r.includes('output_text.delta')).length).toBeGreaterThan(1);
    expect(only(stack.sims.prefill.requests).json).toMatchObject({ stream: false });
  });

  it('an unsupported field is a 400 naming it, before any leg', async () => {
    const res = await client.post('/v1/responses', { model: MODEL, input: 'hi', previous_response_id: 'resp_123' });
    expect(res.status).toBe(400);
    expect(at(res.json, 'error', 'message')).toMatch(/^field "previous_response_id" is not supported by the router/);
    expect(stack.sims.render.requests).toHaveLength(0);
    expect(stack.sims.decode.requests).toHaveLength(0);
  });

  it('prefill 500: 502 without the upstream body, as for chat', async () => {
    stack.sims.prefill.setFaults([{ match: { profile: 'prefill' }, status: 500, body: 'SECRET-UPSTREAM-DETAIL' }]);
    const id = nextId();
    const res = await client.post('/v1/responses', { model: MODEL, input: 'fail please' }, { headers: { 'x-request-id': id } });
    expect(res.status).toBe(502);
    expect(res.text).not.toContain('SECRET');
    const line = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
    expect(line).toMatchObject({ path_taken: 'error', error_step: 'prefill', error_class: 'upstream_5xx' });
  });
});
