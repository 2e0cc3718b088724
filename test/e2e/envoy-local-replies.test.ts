/**
 * Envoy's own failure replies reach clients in the same OpenAI error shape as the coordinator's
 * (envoy/ `local_reply_config`), and nothing else is rewritten: the coordinator's errors and a
 * decode worker's own answer pass as they were.
 */
import { startSimulator, type Simulator } from '../../sim/simulator';
import { TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';
import { expectOpenAiError } from '../faults/support/expect';

const PLAIN = { model: 'sim-model', prompt: 'hello', max_tokens: 2 };

describe.each(['full_duplex', 'buffered'] as const)("Envoy's local replies (%s)", (bodyMode) => {
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startStack({ bodyMode, steps: () => [{ type: 'prefill' }, { type: 'decode' }] });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it('a decode worker Envoy cannot reach: 503 in the OpenAI error shape, naming the request', async () => {
    const sims = stack.sims as Record<'decode', Simulator>;
    const decode = sims.decode;
    await decode.close();
    try {
      const res = await client.post('/v1/completions', PLAIN, { headers: { 'x-request-id': 'down-1' } });
      expectOpenAiError(res, 503);
      expect(res.json).toEqual({
        error: {
          message: expect.stringMatching(/^upstream connect error .* \(request_id: down-1\)$/),
          type: 'upstream_error',
          param: null,
          code: 503,
        },
      });
    } finally {
      sims.decode = await startSimulator({ name: decode.name, role: decode.role, port: decode.port });
    }
  });

  it("the coordinator's own errors are not rewritten", async () => {
    const bad = await client.post('/v1/completions', '{"model":', { headers: { 'x-request-id': 'bad-1' } });
    expectOpenAiError(bad, 400);
    expect(bad.json).toMatchObject({ error: { message: expect.stringMatching(/^invalid JSON body/), type: 'invalid_request_error' } });

    stack.sims.prefill.setFaults([{ status: 429, body: 'slow down' }]);
    const rejected = await client.post('/v1/completions', PLAIN);
    expectOpenAiError(rejected, 429);
    expect(rejected.json).toMatchObject({ error: { message: expect.stringMatching(/^prefill rejected the request: HTTP 429/) } });
  });

  it("a decode worker's own error answer is relayed as it was", async () => {
    stack.sims.decode.setFaults([{ status: 503, body: '{"detail":"worker overloaded"}' }]);
    const res = await client.post('/v1/completions', PLAIN);
    expect(res.status).toBe(503);
    expect(res.text).toBe('{"detail":"worker overloaded"}');
  });
});
