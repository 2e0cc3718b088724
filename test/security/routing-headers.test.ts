/**
 * A client can never address a worker role or a pod itself (issue #8, DESIGN §1): routing headers
 * it sends through the public listener never reach a worker as it sent them.
 */
import { at, TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';

const chat = { model: 'sim-model', messages: [{ role: 'user', content: 'route me' }], max_tokens: 3 };

describe.each(['full_duplex', 'buffered'] as const)('client routing headers (%s)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startStack({ bodyMode });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it('a spoofed epp-profile: prefill is not honoured: the request runs the cascade and decode answers', async () => {
    const prefill = `127.0.0.1:${stack.sims.prefill.port}`;
    const res = await client.post('/v1/chat/completions', chat, {
      headers: { 'epp-profile': 'prefill', 'x-gateway-destination-endpoint': prefill, 'x-request-id': `spoof-${bodyMode}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers['x-inference-pod']).toBe('sim-decode-0');
    expect(at(res.json, 'choices', 0, 'message', 'content')).toBe('route me');

    // Prefill saw exactly the coordinator's one leg, decode exactly the rewritten request.
    expect(stack.sims.prefill.requests).toHaveLength(1);
    expect(stack.sims.decode.requests).toHaveLength(1);
    const legs = [...stack.sims.render.requests, ...stack.sims.prefill.requests, ...stack.sims.decode.requests];
    for (const leg of legs) expect(leg.headers).not.toHaveProperty('x-gateway-destination-endpoint');
    expect(stack.sims.render.requests[0]!.headers).not.toHaveProperty('epp-profile');
    expect(stack.sims.prefill.requests[0]!.headers['epp-profile']).toBe('prefill');
    expect(stack.sims.decode.requests[0]!.headers['epp-profile']).toBe('decode');
  });

  it.each(['decode', 'encode', 'PREFILL', 'prefill, decode'])('epp-profile %j from a client changes nothing', async (profile) => {
    const res = await client.post('/v1/chat/completions', chat, { headers: { 'epp-profile': profile } });
    expect(res.status).toBe(200);
    expect(stack.sims.encode.requests).toHaveLength(0);
    expect(stack.sims.prefill.requests).toHaveLength(1);
    expect(stack.sims.decode.requests[0]!.headers['epp-profile']).toBe('decode');
  });

  it('a request the pipeline refuses reaches no worker, whatever routing headers it carries', async () => {
    const res = await client.post('/v1/chat/completions', '{"model": "sim-model", "messages": [', {
      headers: { 'epp-profile': 'decode', 'x-gateway-destination-endpoint': `127.0.0.1:${stack.sims.decode.port}` },
    });
    expect(res.status).toBe(400);
    for (const sim of Object.values(stack.sims)) expect(sim.requests).toHaveLength(0);
  });

  it("a request the pipeline does not handle (GET /v1/models) loses the client's routing headers too", async () => {
    const { request } = await import('undici');
    const res = await request(`${stack.publicUrl}/v1/models`, {
      headers: { 'epp-profile': 'prefill', 'x-gateway-destination-endpoint': `127.0.0.1:${stack.sims.prefill.port}` },
    });
    await res.body.text();
    expect(res.statusCode).toBe(200);
    expect(stack.sims.prefill.requests).toHaveLength(0);
    const seen = stack.sims.decode.requests[0]!;
    // The service's own profile, as upstream's passthrough sets it; never the client's.
    expect(seen.headers['epp-profile']).toBe('decode');
    expect(seen.headers).not.toHaveProperty('x-gateway-destination-endpoint');
  });

  // The EPP also reads `x-llm-d-pin-host-port` (pins a prefill pod) and `prefer`
  // (if-available, reserve-endpoint: answers with a pod address); the envoy/ strip-routing-headers
  // filter removes a client's, and the coordinator sets its own where it needs them.
  it('client pin / reserve headers never reach a worker as sent', async () => {
    const res = await client.post('/v1/chat/completions', chat, {
      headers: { 'x-llm-d-pin-host-port': '10.9.9.9:8000', prefer: 'reserve-endpoint' },
    });
    expect(res.status).toBe(200);
    for (const leg of [...stack.sims.prefill.requests, ...stack.sims.decode.requests]) {
      expect(leg.headers['x-llm-d-pin-host-port']).toBeUndefined();
      expect(leg.headers['prefer']).toBeUndefined();
    }
  });
});
