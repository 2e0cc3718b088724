/**
 * Issue #12 acceptance, through the real Envoy in both body modes: a client's fairness id,
 * objective, priority, SLO, pin, profile or transfer header never reaches any leg (render, encode,
 * prefill, decode) as the client sent it, and a header value that is not visible ASCII gets a 400
 * naming the header, with no leg run at all.
 *
 * What each leg received is what the simulator recorded. The assertions name only headers and
 * answers, so the same cases can later be pointed at a stack with the real EPP in front.
 */
import { request } from 'undici';
import { PNG_BYTES } from '../unit/steps/media/image-server';
import { TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';
import { LATIN1_VALUE, spoofedGatewayHeaders } from '../support/trust-cases';

const SPOOFED = spoofedGatewayHeaders();

const pngUri = `data:image/png;base64,${PNG_BYTES.toString('base64')}`;
const imageChat = {
  model: 'sim-model',
  max_tokens: 3,
  messages: [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'what is this' },
        { type: 'image_url', image_url: { url: pngUri } },
      ],
    },
  ],
};

describe.each(['full_duplex', 'buffered'] as const)('the header policy through Envoy (%s)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startStack({
      bodyMode,
      trustedClientHeaders: ['x-llm-d-slo-ttft-ms'],
      steps: ({ render }) => [
        { type: 'replace-media-urls', params: { allowed_domains: ['127.0.0.1'] } },
        { type: 'render', params: { address: render } },
        { type: 'encode', params: { ec_connector: 'ec-nixl' } },
        { type: 'prefill', params: { ec_connector: 'ec-nixl' } },
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

  const allLegs = () => [
    ...stack.sims.render.requests,
    ...stack.sims.encode.requests,
    ...stack.sims.prefill.requests,
    ...stack.sims.decode.requests,
  ];

  test('no client gateway header reaches any leg as sent; a trusted one reaches every leg', async () => {
    const { 'x-llm-d-slo-ttft-ms': _trusted, ...untrusted } = SPOOFED;
    const res = await client.post('/v1/chat/completions', imageChat, {
      headers: { ...untrusted, 'x-llm-d-slo-ttft-ms': '800', 'x-request-id': `hp-${bodyMode}` },
    });
    expect(res.status).toBe(200);
    expect(stack.sims.render.requests).toHaveLength(1);
    expect(stack.sims.encode.requests).toHaveLength(1);
    expect(stack.sims.prefill.requests).toHaveLength(1);
    expect(stack.sims.decode.requests).toHaveLength(1);
    for (const leg of allLegs()) {
      for (const [name, sent] of Object.entries(untrusted)) expect([name, leg.headers[name]]).not.toEqual([name, sent]);
      expect(leg.headers['x-llm-d-slo-ttft-ms']).toBe('800');
    }
    // What the service sets itself is there: the leg's own profile.
    expect(stack.sims.encode.requests[0]!.headers['epp-profile']).toBe('encode');
    expect(stack.sims.prefill.requests[0]!.headers['epp-profile']).toBe('prefill');
    expect(stack.sims.decode.requests[0]!.headers['epp-profile']).toBe('decode');
    // And no client value of a scheduling header survives, not even under another value.
    for (const leg of allLegs()) {
      for (const name of [
        'x-llm-d-inference-fairness-id',
        'x-gateway-inference-fairness-id',
        'x-llm-d-inference-objective',
        'x-gateway-inference-objective',
        'x-gateway-priority',
        'x-llm-d-pin-host-port',
        'x-peer-topology',
      ]) {
        expect(leg.headers).not.toHaveProperty(name);
      }
    }
  });

  test("a pass-through API (GET /v1/models) reaches decode without the client's gateway headers", async () => {
    const res = await request(`${stack.publicUrl}/v1/models`, {
      headers: { 'x-gateway-inference-fairness-id': 'tenant-b', 'x-llm-d-inference-objective': 'premium' },
    });
    await res.body.text();
    expect(res.statusCode).toBe(200);
    expect(stack.sims.decode.requests).toHaveLength(1);
    expect(stack.sims.decode.requests[0]!.headers).not.toHaveProperty('x-gateway-inference-fairness-id');
    expect(stack.sims.decode.requests[0]!.headers).not.toHaveProperty('x-llm-d-inference-objective');
  });

  const latin1 = LATIN1_VALUE;
  test.each([
    ['a trusted gateway header', 'x-llm-d-slo-ttft-ms', 'POST', '/v1/chat/completions'],
    ['an ordinary header', 'x-client-note', 'POST', '/v1/chat/completions'],
    ['an ordinary header on a pass-through API', 'x-client-note', 'GET', '/v1/models'],
  ])('%s with a non-ASCII value (%s, %s %s): 400 naming it, no leg runs', async (_what, name, method, path) => {
    const res = await request(`${stack.publicUrl}${path}`, {
      method: method as 'GET' | 'POST',
      headers: { 'content-type': 'application/json', [name]: latin1, 'x-request-id': `na-${bodyMode.replace('_', '-')}` },
      body: method === 'POST' ? JSON.stringify(imageChat) : undefined,
    });
    const body = (await res.body.json()) as { error: { message: string; type: string } };
    expect(res.statusCode).toBe(400);
    expect(body.error).toMatchObject({
      type: 'invalid_request_error',
      message: `header "${name}" has a value that is not visible ASCII (request_id: na-${bodyMode.replace('_', '-')})`,
    });
    expect(allLegs()).toHaveLength(0);
  });

  test('a repeated header whose later value is not visible ASCII (Envoy forwards every value): 400 naming it, no leg runs', async () => {
    const res = await request(`${stack.publicUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-client-note': ['fine', latin1],
        'x-request-id': `rep-${bodyMode.replace('_', '-')}`,
      },
      body: JSON.stringify(imageChat),
    });
    const body = (await res.body.json()) as { error: { message: string } };
    expect(res.statusCode).toBe(400);
    expect(body.error.message).toBe(
      `header "x-client-note" has a value that is not visible ASCII (request_id: rep-${bodyMode.replace('_', '-')})`,
    );
    expect(allLegs()).toHaveLength(0);
  });

  test('the same non-ASCII value on an untrusted gateway header is just removed: the request is served', async () => {
    const res = await request(`${stack.publicUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-gateway-inference-fairness-id': latin1 },
      body: JSON.stringify(imageChat),
    });
    await res.body.text();
    expect(res.statusCode).toBe(200);
    for (const leg of allLegs()) expect(leg.headers).not.toHaveProperty('x-gateway-inference-fairness-id');
  });
});
