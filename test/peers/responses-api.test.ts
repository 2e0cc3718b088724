/**
 * Issue #19 item 2: `POST /v1/responses` disaggregated through real llm-d-inference-sim workers,
 * which have no `/v1/responses/render` route. Render `responses_via: auto` (the default) gets one
 * 404 there, renders through `/v1/chat/completions/render` from then on, and the worker legs stay on
 * the Responses wire: encode and prefill capped to one unstored token, decode with the client's
 * body and the KV params.
 *
 * The stack is the no-Kubernetes topology (launch/epp-stack.ts): Envoy, epd-coordinator, the real
 * llm-d EPP (file discovery) and llm-d-inference-sim as render, encode, prefill and decode. Every
 * case checks the simulators' `--log-http` blocks per leg, not only the client's status.
 *
 * Needs `$PEERS_BIN/epp` and `$PEERS_BIN/llm-d-inference-sim` (prebuilt; nothing here builds them);
 * skipped with the reason otherwise.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EPP_STACK_MODEL, freeEppStackPorts, startEppStack, type EppStack } from '../../launch/epp-stack';
import type { WorkerRole } from '../../launch/epp-topology';
import { at, sseData, TestClient } from '../../launch/client';
import { eventually, peerBin, peersSkipReason, readAccessLog, simRequestsFor, type SimHttpRequest } from '../support/peers';
import { uniqueImage } from '../support/unique-image';
import { stubImageHash } from '../../sim/dummy-tokenizer';

const skip = peersSkipReason(['epp', 'llm-d-inference-sim']);
const suite = skip ? describe.skip : describe;
const MODEL = EPP_STACK_MODEL;
const WORKERS: WorkerRole[] = ['encode', 'prefill', 'decode'];
const CHAT_RENDER = '/v1/chat/completions/render';
const NATIVE_RENDER = '/v1/responses/render';
const FALLBACK_LINE = 'render service has no Responses route';
let seq = 0;
const nextId = (what: string): string => `peers-responses-${what}-${process.pid}-${++seq}`;

suite(`Responses API through real llm-d-inference-sim workers and the llm-d EPP${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let dir: string;
  let stack: EppStack;
  let client: TestClient;

  const logsOf = (role: WorkerRole | 'render'): string[] =>
    role === 'render' ? [stack.logs['sim-render-0']!] : stack.endpoints.filter((e) => e.role === role).map((e) => stack.logs[e.name]!);
  const legs = (role: WorkerRole | 'render', id: string): SimHttpRequest[] => simRequestsFor(logsOf(role), id);
  const waitLegs = (role: WorkerRole | 'render', id: string, n: number) =>
    eventually(
      () => legs(role, id),
      (l) => l.length >= n,
      `${n} ${role} leg(s) of ${id}`,
    );
  const fallbacks = (): number => readFileSync(stack.logs['epd-coordinator']!, 'utf8').split(FALLBACK_LINE).length - 1;
  const publicLine = (id: string) =>
    eventually(
      () => readAccessLog(stack.accessLogPath).filter((l) => l['id'] === id && l['listener'] === 'public'),
      (ls) => ls.length === 1,
      `the public access-log line of ${id}`,
      8000,
    ).then((ls) => ls[0]!);

  /** Prefill on /v1/responses, capped to one unstored, unstreamed token; decode on /v1/responses with the KV params. */
  async function expectWorkerLegs(id: string): Promise<{ prefill: SimHttpRequest; decode: SimHttpRequest }> {
    const [prefill] = await waitLegs('prefill', id, 1);
    expect(legs('prefill', id)).toHaveLength(1);
    expect(prefill!.uri).toBe('/v1/responses');
    expect(prefill!.headers['epp-profile']).toBe('prefill');
    expect(prefill!.json).toMatchObject({
      max_output_tokens: 1,
      store: false,
      stream: false,
      kv_transfer_params: { do_remote_decode: true },
    });
    const [decode] = await waitLegs('decode', id, 1);
    expect(legs('decode', id)).toHaveLength(1);
    expect(decode!.uri).toBe('/v1/responses');
    expect(decode!.headers['epp-profile']).toBe('decode');
    // llm-d-inference-sim's Responses answer carries no kv_transfer_params (its chat answer does), so
    // decode gets only the flags, as upstream builds them from an empty prefill answer.
    expect(at(decode!.json, 'kv_transfer_params')).toMatchObject({ do_remote_prefill: true, do_remote_decode: false });
    const line = await publicLine(id);
    expect(line).toMatchObject({ code: '200', path_taken: 'cascade', 'epp-profile': 'decode' });
    return { prefill: prefill!, decode: decode! };
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-peers-responses-'));
    stack = await startEppStack({
      dir,
      ports: await freeEppStackPorts(WORKERS),
      eppBin: peerBin('epp'),
      simBin: peerBin('llm-d-inference-sim'),
      readyTimeoutMs: 90_000,
    });
    client = new TestClient(stack.publicUrl);
  }, 180_000);

  afterAll(async () => {
    await client?.close();
    await stack?.stop();
    if (dir && !process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('plain: rendered at the chat route (instructions a system message), prefill then decode on /v1/responses; 200 from the decode worker', async () => {
    const id = nextId('plain');
    const res = await client.post(
      '/v1/responses',
      { model: MODEL, instructions: 'Answer briefly.', input: 'hello responses', max_output_tokens: 16 },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ object: 'response', status: 'completed' });
    expect(res.headers['x-inference-pod']).toBe('sim-decode-0');

    // The stack's first Responses request: the native route answered 404, then the chat route.
    const render = await waitLegs('render', id, 2);
    expect(render.map((r) => r.uri)).toEqual([NATIVE_RENDER, CHAT_RENDER]);
    expect(render[0]!.json).toMatchObject({ instructions: 'Answer briefly.', input: 'hello responses' });
    expect(at(render[1]!.json, 'messages')).toEqual([
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: 'hello responses' },
    ]);
    const { decode } = await expectWorkerLegs(id);
    expect(decode.json).toMatchObject({ instructions: 'Answer briefly.', input: 'hello responses', max_output_tokens: 16 });
    expect(fallbacks()).toBe(1);
  });

  it('streamed: the Responses SSE reaches the client through Envoy, ending with response.completed; prefill stayed unstreamed', async () => {
    const id = nextId('stream');
    const res = await client.post(
      '/v1/responses',
      { model: MODEL, stream: true, input: [{ role: 'user', content: [{ type: 'input_text', text: 'one two three four' }] }] },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/event-stream/);
    const types = sseData(res.text)
      .filter((d) => d !== '[DONE]')
      .map((d) => at(JSON.parse(d), 'type'));
    expect(types).toContain('response.output_text.delta');
    expect(types[types.length - 1]).toBe('response.completed');

    // Straight to the chat route: the 404 is remembered for this render address.
    const render = await waitLegs('render', id, 1);
    expect(render.map((r) => r.uri)).toEqual([CHAT_RENDER]);
    expect(at(render[0]!.json, 'messages')).toEqual([{ role: 'user', content: [{ type: 'text', text: 'one two three four' }] }]);
    const { decode } = await expectWorkerLegs(id);
    expect(at(decode.json, 'stream')).toBe(true);
    expect(fallbacks()).toBe(1);
  });

  it('input_image: rendered as an image_url part, one encode leg on /v1/responses capped to one token, the render hash on the decode image', async () => {
    const id = nextId('image');
    const image = uniqueImage();
    const res = await client.post(
      '/v1/responses',
      {
        model: MODEL,
        input: [
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'Describe what you see.' },
              { type: 'input_image', image_url: image },
            ],
          },
        ],
        max_output_tokens: 8,
      },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);

    const render = await waitLegs('render', id, 1);
    expect(render.map((r) => r.uri)).toEqual([CHAT_RENDER]);
    expect(at(render[0]!.json, 'messages', 0, 'content', 1)).toEqual({ type: 'image_url', image_url: { url: image } });
    const [encode] = await waitLegs('encode', id, 1);
    expect(legs('encode', id)).toHaveLength(1);
    expect(encode!.uri).toBe('/v1/responses');
    expect(encode!.headers['epp-profile']).toBe('encode');
    expect(encode!.json).toMatchObject({ max_output_tokens: 1, store: false, stream: false });
    const { prefill, decode } = await expectWorkerLegs(id);
    // The decode image carries the hash the chat render gave it (the dummy tokenizer's stub hash).
    const hash = stubImageHash(0, image);
    expect(at(decode.json, 'input', 0, 'content', 1)).toEqual({ type: 'input_image', image_url: image, uuid: hash });
    // llm-d-inference-sim answers /v1/responses without ec_transfer_params (its chat answers carry
    // them; vLLM's Responses answers carry kv_transfer_params), so there are none to merge here.
    expect(at(prefill.json, 'ec_transfer_params')).toBeUndefined();
    expect(fallbacks()).toBe(1);
  });
});
