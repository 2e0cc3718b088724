/** A render service that cannot be reached fails the request with 502, through the real Envoy. */
import { at, TestClient } from '../../launch/client';
import { REFUSED_PORT } from '../../launch/ports';
import { startStack, type Stack } from '../support/stack';

describe.each(['full_duplex', 'buffered'] as const)('render unreachable (%s)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;

  beforeAll(async () => {
    stack = await startStack({
      bodyMode,
      steps: () => [
        { type: 'render', params: { address: `http://127.0.0.1:${REFUSED_PORT}`, timeout: '5s' } },
        { type: 'prefill' },
        { type: 'decode' },
      ],
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });

  it('answers 502 with a JSON error and calls no worker', async () => {
    const id = `render-down-${bodyMode.replace('_', '-')}`;
    const res = await client.post(
      '/v1/chat/completions',
      { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }] },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(502);
    expect(res.json).toMatchObject({ error: { type: 'api_error', code: 502 } });
    expect(String(at(res.json, 'error', 'message'))).toContain(id);
    expect(stack.sims.prefill.requests).toHaveLength(0);
    expect(stack.sims.decode.requests).toHaveLength(0);
    const line = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
    expect(line).toMatchObject({ response_code: 502, path_taken: 'error', error_step: 'render', error_class: 'transport' });
  });

  it('a request that needs no render still succeeds', async () => {
    const res = await client.post('/v1/completions', { model: 'sim-model', prompt: [1, 2, 3], max_tokens: 2 });
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'text')).toBe('1,2,');
  });
});
