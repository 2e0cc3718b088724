/**
 * Issue #12 acceptance: the public listener's path policy, through the real Envoy in both body
 * modes. Every known worker control path and every variant of an inference path gets its
 * documented answer (docs/hardening.md), and no control path reaches a worker: what each
 * simulator recorded is the evidence. Paths are sent raw (undici's Client takes the request
 * target as given; a URL object would normalise it first).
 */
import { Client } from 'undici';
import { KNOWN_CONTROL_PATHS, REFUSED_PATH_BODY } from '../../src/pipeline/path-policy';
import { startStack, ROLES, type Stack } from '../support/stack';
import { PATH_VARIANTS } from '../support/trust-cases';

const chat = JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'path' }], max_tokens: 2 });

describe.each(['full_duplex', 'buffered'] as const)('path policy through Envoy (%s)', (bodyMode) => {
  let stack: Stack;
  let client: Client;
  beforeAll(async () => {
    stack = await startStack({ bodyMode });
    client = new Client(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  const send = async (method: 'GET' | 'POST', path: string) => {
    const res = await client.request({
      method,
      path,
      headers: { 'content-type': 'application/json' },
      body: method === 'POST' ? chat : undefined,
    });
    const text = await res.body.text();
    return { status: res.statusCode, headers: res.headers, text };
  };
  const workerRequests = () => ROLES.flatMap((r) => stack.sims[r].requests.map((q) => `${r} ${q.method} ${q.url}`));

  test.each(
    KNOWN_CONTROL_PATHS.flatMap(
      (p) =>
        [
          ['GET', p],
          ['POST', p],
        ] as const,
    ),
  )("%s %s: Envoy's 404 in the OpenAI error shape; no worker sees it", async (method, path) => {
    const res = await send(method, path);
    expect(res.status).toBe(404);
    expect(res.headers['content-type']).toBe('application/json');
    expect(JSON.parse(res.text)).toEqual(JSON.parse(REFUSED_PATH_BODY));
    expect(workerRequests()).toEqual([]);
  });

  test.each(PATH_VARIANTS)('POST %s: %s', async (path, answer) => {
    const res = await send('POST', path);
    if (answer === 'pipeline') {
      expect(res.status).toBe(200);
      // Processed: the coordinator's prefill leg ran, and decode got the rewritten request.
      expect(stack.sims.prefill.requests).toHaveLength(1);
      expect(stack.sims.decode.requests).toHaveLength(1);
      expect(stack.sims.decode.requests[0]!.path).toBe('/v1/chat/completions');
      expect(stack.sims.decode.requests[0]!.body.toString()).toContain('kv_transfer_params');
      return;
    }
    expect(res.status).toBe(answer);
    if (answer === 404) expect(JSON.parse(res.text)).toEqual(JSON.parse(REFUSED_PATH_BODY));
    if (answer === 307) expect(res.headers['location']).toBe('/v1/chat/completions');
    expect(workerRequests()).toEqual([]);
  });

  test('the other OpenAI APIs reach decode as they came, marked for decode', async () => {
    const res = await send('GET', '/v1/models');
    expect(res.status).toBe(200);
    expect(stack.sims.decode.requests).toHaveLength(1);
    expect(stack.sims.decode.requests[0]!.headers['epp-profile']).toBe('decode');
    expect(stack.sims.prefill.requests).toHaveLength(0);
  });
});
