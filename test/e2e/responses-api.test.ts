/**
 * `POST /v1/responses` through the real Envoy: render -> (encode ->) prefill -> decode, with the
 * Responses wire on the worker legs, streaming and not, and the same error mapping as chat.
 *
 * By default our simulators answer what real workers answer: no `/v1/responses/render` (404), so
 * render `responses_via: auto` (the default) falls back to the chat render route after one 404 and
 * goes straight there afterwards. With the simulators' `responsesRender` option the native route
 * exists and is used.
 */
import type { RecordedRequest } from '../../sim/simulator';
import { at, sseData, TestClient } from '../../launch/client';
import { startStack, type Stack, type StepYaml } from '../support/stack';

const MODEL = 'sim-model';
const NATIVE = '/v1/responses/render';
const CHAT = '/v1/chat/completions/render';
const IMG = 'data:image/png;base64,iVBORw0KGgo=';
let seq = 0;
const nextId = (): string => `resp-e2e-${process.pid}-${Date.now()}-${++seq}`;
const legsFor = (reqs: RecordedRequest[], id: string): RecordedRequest[] => reqs.filter((r) => r.headers['x-request-id'] === id);
const only = (reqs: RecordedRequest[]): RecordedRequest => {
  expect(reqs).toHaveLength(1);
  return reqs[0]!;
};
/** The render calls of one request, as `path status`. */
const renderCalls = (stack: Stack, id: string): string[] => legsFor(stack.sims.render.requests, id).map((r) => `${r.path} ${r.status}`);

function steps(params: Record<string, unknown> = {}): (urls: { render: string }) => StepYaml[] {
  return ({ render }) => [
    { type: 'replace-media-urls' },
    { type: 'render', params: { address: render, timeout: '30s', ...params } },
    { type: 'encode', params: { ec_connector: 'ec-nixl' } },
    { type: 'prefill', params: { ec_connector: 'ec-nixl' } },
    { type: 'decode' },
  ];
}

const text = (words: string) => ({
  model: MODEL,
  instructions: 'answer in the same words',
  input: [{ role: 'user', content: [{ type: 'input_text', text: words }] }],
  max_output_tokens: 20,
  store: true,
});
const withImage = {
  model: MODEL,
  input: [
    {
      role: 'user',
      content: [
        { type: 'input_text', text: 'what is in the picture' },
        { type: 'input_image', image_url: IMG, detail: 'low' },
      ],
    },
  ],
  max_output_tokens: 5,
};

async function post(client: TestClient, body: unknown, id = nextId()) {
  return { id, res: await client.post('/v1/responses', body, { headers: { 'x-request-id': id } }) };
}

describe.each(['full_duplex', 'buffered'] as const)(
  'Responses API through Envoy, render service without a Responses route (%s)',
  (bodyMode) => {
    let stack: Stack;
    let client: TestClient;

    beforeAll(async () => {
      stack = await startStack({ bodyMode, kvConnector: 'kv-nixl', simulator: { interTokenLatencyMs: 5 }, steps: steps() });
      client = new TestClient(stack.publicUrl);
    });
    afterAll(async () => {
      await client?.close();
      await stack?.close();
    });
    beforeEach(() => stack.reset());

    // First in this suite on purpose: it is the stack's first Responses request.
    it('auto: the first request gets one 404 at the Responses route, then renders at the chat route; the second goes straight to chat', async () => {
      const first = await post(client, text('hello responses api'));
      expect(first.res.status).toBe(200);
      expect(renderCalls(stack, first.id)).toEqual([`${NATIVE} 404`, `${CHAT} 200`]);
      const second = await post(client, text('hello again'));
      expect(second.res.status).toBe(200);
      expect(renderCalls(stack, second.id)).toEqual([`${CHAT} 200`]);
    });

    it("non-streaming: render at the chat route (instructions a system message), prefill then decode on /v1/responses; the answer is the decode worker's", async () => {
      const { id, res } = await post(client, text('hello responses api'));
      expect(res.status).toBe(200);
      expect(res.json).toMatchObject({ object: 'response', status: 'completed' });
      expect(at(res.json, 'output', 0, 'content', 0, 'text')).toBe('hello responses api');

      const render = only(legsFor(stack.sims.render.requests, id));
      expect(render.path).toBe(CHAT);
      expect(render.json).toEqual({
        model: MODEL,
        messages: [
          { role: 'system', content: 'answer in the same words' },
          { role: 'user', content: [{ type: 'text', text: 'hello responses api' }] },
        ],
        max_tokens: 20,
      });
      const prefill = only(stack.sims.prefill.requests);
      expect(prefill.path).toBe('/v1/responses');
      expect(prefill.headers['epp-profile']).toBe('prefill');
      expect(prefill.json).toMatchObject({
        max_output_tokens: 1,
        store: false,
        stream: false,
        kv_transfer_params: { do_remote_decode: true },
      });
      expect(prefill.json).not.toHaveProperty('messages');
      const decode = only(stack.sims.decode.requests);
      expect(decode.path).toBe('/v1/responses');
      expect(decode.json).toMatchObject({ max_output_tokens: 20, store: true, kv_transfer_params: { do_remote_prefill: true } });
      // Prefill first: decode is forwarded only once prefill answered.
      expect(prefill.receivedAt).toBeLessThanOrEqual(decode.receivedAt);

      const line = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
      expect(line).toMatchObject({ path_taken: 'cascade', disaggregation: 'disaggregated' });
      // The chat render's token ids: BOS, the roles and the words of both messages.
      expect(Number(line.token_count)).toBeGreaterThan(5);
    });

    it('streaming: Responses SSE events arrive incrementally through Envoy, ending with response.completed', async () => {
      const { id, res } = await post(client, { model: MODEL, stream: true, input: 'one two three four five six' });
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toMatch(/text\/event-stream/);
      const events = sseData(res.text)
        .filter((d) => d !== '[DONE]')
        .map((d) => JSON.parse(d) as { type: string; delta?: string });
      const deltas = events
        .filter((e) => e.type === 'response.output_text.delta')
        .map((e) => e.delta)
        .join('');
      expect(deltas).toBe('one two three four five six');
      expect(events[events.length - 1]!.type).toBe('response.completed');
      expect(res.reads.filter((r) => r.includes('output_text.delta')).length).toBeGreaterThan(1);
      expect(only(legsFor(stack.sims.render.requests, id)).json).toMatchObject({
        messages: [{ role: 'user', content: 'one two three four five six' }],
      });
      expect(only(stack.sims.prefill.requests).json).toMatchObject({ stream: false });
      expect(only(stack.sims.decode.requests).json).toMatchObject({ stream: true });
    });

    it("input_image: rendered as an image_url part at the chat route; encode, prefill and decode on /v1/responses with the render's image hash", async () => {
      const { id, res } = await post(client, withImage);
      expect(res.status).toBe(200);
      const render = only(legsFor(stack.sims.render.requests, id));
      expect(render.path).toBe(CHAT);
      expect(at(render.json, 'messages', 0, 'content', 1)).toEqual({ type: 'image_url', image_url: { url: IMG, detail: 'low' } });

      const encode = only(legsFor(stack.sims.encode.requests, id));
      expect(encode.path).toBe('/v1/responses');
      expect(encode.headers['epp-profile']).toBe('encode');
      const prefill = only(legsFor(stack.sims.prefill.requests, id));
      expect(prefill.path).toBe('/v1/responses');
      const ec = at(prefill.json, 'ec_transfer_params') as Record<string, unknown>;
      const hashes = Object.keys(ec);
      expect(hashes).toHaveLength(1);
      // The decode body is the client's Responses body, its image tagged with the hash render gave.
      const decode = only(legsFor(stack.sims.decode.requests, id));
      expect(decode.path).toBe('/v1/responses');
      expect(at(decode.json, 'input', 0, 'content', 1)).toEqual({ type: 'input_image', image_url: IMG, detail: 'low', uuid: hashes[0] });
    });

    it('an unsupported field is a 400 naming it, before any leg', async () => {
      const { res } = await post(client, { model: MODEL, input: 'hi', previous_response_id: 'resp_123' });
      expect(res.status).toBe(400);
      expect(at(res.json, 'error', 'message')).toMatch(/^field "previous_response_id" is not supported by the router/);
      expect(stack.sims.render.requests).toHaveLength(0);
      expect(stack.sims.decode.requests).toHaveLength(0);
    });

    it('prefill 500: 502 without the upstream body, as for chat', async () => {
      stack.sims.prefill.setFaults([{ match: { profile: 'prefill' }, status: 500, body: 'SECRET-UPSTREAM-DETAIL' }]);
      const { id, res } = await post(client, { model: MODEL, input: 'fail please' });
      expect(res.status).toBe(502);
      expect(res.text).not.toContain('SECRET');
      const line = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
      expect(line).toMatchObject({ path_taken: 'error', error_step: 'prefill', error_class: 'upstream_5xx' });
    });
  },
);

describe('Responses API through Envoy, simulators with the Responses render route (responsesRender)', () => {
  let stack: Stack;
  let client: TestClient;

  beforeAll(async () => {
    stack = await startStack({ kvConnector: 'kv-nixl', simulator: { responsesRender: true }, steps: steps() });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it('auto: the native route is used, every time, with the client body as it came', async () => {
    for (const body of [text('native please'), withImage]) {
      const { id, res } = await post(client, body);
      expect(res.status).toBe(200);
      const render = only(legsFor(stack.sims.render.requests, id));
      expect(`${render.path} ${render.status}`).toBe(`${NATIVE} 200`);
      expect(render.json).toEqual(body);
      expect(only(legsFor(stack.sims.decode.requests, id)).path).toBe('/v1/responses');
    }
  });
});
