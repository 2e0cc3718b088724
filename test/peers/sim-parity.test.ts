/**
 * Issue #19 item 5: our sim/ answers like llm-d-inference-sim, the worker it stands for. The same
 * requests go straight (no Envoy) to both, playing each role the pipeline uses: a render service,
 * a generation worker (prefill and decode: which one is chosen per request by kv_transfer_params)
 * and an encoder (`--mm-encoder-only`). For every route the pipeline calls, the statuses and the
 * shapes of the bodies (key sets and value types, recursively; SSE as the sequence of event shapes)
 * must be equal. Values (generated text, ids, token counts) are not compared.
 *
 * Where they differ, sim/ is what gets fixed. Known differences of value, not of shape, which this
 * test therefore does not see and which are accepted:
 * - the token ids: each has its own dummy tokenizer, so render's ids, image placeholder offsets and
 *   lengths, and usage counts differ;
 * - echo mode: llm-d-inference-sim echoes the whole prompt whatever `max_tokens` says (finish
 *   reason `length` when it is longer), ours stops at `max_tokens`; a chat echo is its last message,
 *   ours the last user message;
 * - ids and timestamps (`chatcmpl-<request id>` vs `cmpl-<request id>-0`, `created`), and a
 *   model's `owned_by` (`epd-sim`, theirs `vllm`).
 *
 * One difference of shape is allowed, in ALLOWED below.
 *
 * Version run against: llm-d-inference-sim main eec055a3.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EPP_STACK_MODEL, simArgv } from '../../launch/epp-stack-plan';
import { freePort, waitUntil } from '../../launch/ports';
import { startChild, type Child } from '../../launch/supervise';
import { startSimulator, type Simulator } from '../../sim/simulator';
import { peerBin, peersSkipReason } from '../support/peers';
import { uniqueImage } from '../support/unique-image';
import { answerShape, type AnswerShape, type Shape } from '../support/shape';

const skip = peersSkipReason(['llm-d-inference-sim']);
const suite = skip ? describe.skip : describe;
const MODEL = EPP_STACK_MODEL;

type Worker = 'render' | 'worker' | 'encode';

interface Probe {
  readonly name: string;
  readonly worker: Worker;
  readonly method?: 'GET' | 'POST';
  readonly path: string;
  readonly body?: unknown;
  readonly headers?: Record<string, string>;
  /** Both must answer this status (else: equal to each other, whatever it is). */
  readonly status?: number;
}

/**
 * Top-level keys of our answer left out of the comparison, per probe, and why. Only keys sim/ adds:
 * a key the real worker answers and sim/ lacks always fails.
 */
const ALLOWED: Readonly<Record<string, { readonly keys: readonly string[]; readonly why: string }>> = {
  'responses, prefill leg': {
    keys: ['kv_transfer_params'],
    why: "vLLM's Responses answers carry kv_transfer_params, llm-d-inference-sim's do not (docs/responses-api.md); sim/ answers them as vLLM does, so the e2e suites can check the decode leg gets them",
  },
  'encode, responses': {
    keys: ['ec_transfer_params'],
    why: 'as above, for the encoder: sim/ answers the ec_transfer_params its chat route answers, so the e2e suites can check prefill gets them',
  },
};

const chat = (content: unknown, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: 'user', content }],
  ...extra,
});
const image = uniqueImage();
const imageChat = (extra: Record<string, unknown> = {}) =>
  chat(
    [
      { type: 'text', text: 'what is in the picture' },
      { type: 'image_url', image_url: { url: image } },
    ],
    extra,
  );

/** The kv_transfer_params the nixl connector sends to prefill, and to decode (from prefill's answer). */
const PREFILL_KV = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
};
const DECODE_KV = {
  do_remote_decode: false,
  do_remote_prefill: true,
  remote_engine_id: 'DUMMY_ID',
  remote_block_ids: ['DUMMY_ID'],
  remote_host: 'DUMMY',
  remote_port: 1234,
  tp_size: 1,
};
const prefill = (extra: Record<string, unknown> = {}) => ({ max_tokens: 1, stream: false, kv_transfer_params: PREFILL_KV, ...extra });
const decode = { kv_transfer_params: DECODE_KV };
const tokens = [1000, 1001, 1002, 1003, 1004, 1005];
const generate = (extra: Record<string, unknown> = {}, sampling: Record<string, unknown> = {}) => ({
  model: MODEL,
  token_ids: tokens,
  sampling_params: { max_tokens: 4, ...sampling },
  ...extra,
});
const stream = { stream: true, stream_options: { include_usage: true } };

const PROBES: Probe[] = [
  // The render service (render step).
  { name: 'chat render, text', worker: 'render', path: '/v1/chat/completions/render', body: chat('hello there') },
  { name: 'chat render, image', worker: 'render', path: '/v1/chat/completions/render', body: imageChat() },
  { name: 'completions render, string', worker: 'render', path: '/v1/completions/render', body: { model: MODEL, prompt: 'hello there' } },
  { name: 'completions render, token ids', worker: 'render', path: '/v1/completions/render', body: { model: MODEL, prompt: tokens } },
  // Neither serves a Responses render route (the render step falls back to the chat route).
  { name: 'responses render', worker: 'render', path: '/v1/responses/render', body: { model: MODEL, input: 'hello' }, status: 404 },
  {
    name: 'chat render, messages not a list',
    worker: 'render',
    path: '/v1/chat/completions/render',
    body: { model: MODEL, messages: 'x' },
    status: 400,
  },
  // A generation worker: plain (no disaggregation), prefill and decode legs.
  { name: 'chat', worker: 'worker', path: '/v1/chat/completions', body: chat('hello there') },
  { name: 'chat, prefill leg', worker: 'worker', path: '/v1/chat/completions', body: chat('hello there', prefill()) },
  { name: 'chat, decode leg', worker: 'worker', path: '/v1/chat/completions', body: chat('hello there', decode) },
  {
    name: 'chat, decode leg streamed with usage',
    worker: 'worker',
    path: '/v1/chat/completions',
    body: chat('one two three', { ...decode, ...stream }),
  },
  { name: 'chat streamed, no usage', worker: 'worker', path: '/v1/chat/completions', body: chat('one two three', { stream: true }) },
  {
    name: 'chat, prefill leg streamed',
    worker: 'worker',
    path: '/v1/chat/completions',
    body: chat('x', prefill({ stream: true })),
    status: 400,
  },
  // The conditional-decode probe: the worker itself does not gate (the EPP does).
  {
    name: 'chat, Prefer: if-available',
    worker: 'worker',
    path: '/v1/chat/completions',
    body: chat('probe me'),
    headers: { prefer: 'if-available' },
  },
  { name: 'chat with an image (prefill leg)', worker: 'worker', path: '/v1/chat/completions', body: imageChat(prefill()) },
  { name: 'completions, token ids', worker: 'worker', path: '/v1/completions', body: { model: MODEL, prompt: tokens } },
  { name: 'completions, prefill leg', worker: 'worker', path: '/v1/completions', body: { model: MODEL, prompt: tokens, ...prefill() } },
  { name: 'completions, decode leg', worker: 'worker', path: '/v1/completions', body: { model: MODEL, prompt: tokens, ...decode } },
  {
    name: 'completions streamed with usage',
    worker: 'worker',
    path: '/v1/completions',
    body: { model: MODEL, prompt: 'one two three', ...stream },
  },
  { name: 'responses', worker: 'worker', path: '/v1/responses', body: { model: MODEL, input: 'hello there' } },
  {
    name: 'responses, prefill leg',
    worker: 'worker',
    path: '/v1/responses',
    body: { model: MODEL, input: 'hello there', max_output_tokens: 1, stream: false, store: false, kv_transfer_params: PREFILL_KV },
  },
  { name: 'responses, decode leg', worker: 'worker', path: '/v1/responses', body: { model: MODEL, input: 'hello there', ...decode } },
  { name: 'responses streamed', worker: 'worker', path: '/v1/responses', body: { model: MODEL, input: 'one two three', stream: true } },
  { name: 'generate', worker: 'worker', path: '/inference/v1/generate', body: generate() },
  {
    name: 'generate, prefill leg',
    worker: 'worker',
    path: '/inference/v1/generate',
    body: generate({}, { max_tokens: 1, extra_args: { kv_transfer_params: PREFILL_KV } }),
  },
  {
    name: 'generate, decode leg',
    worker: 'worker',
    path: '/inference/v1/generate',
    body: generate({}, { extra_args: { kv_transfer_params: DECODE_KV } }),
  },
  { name: 'generate streamed', worker: 'worker', path: '/inference/v1/generate', body: generate({ stream: true }) },
  {
    name: 'responses with instructions',
    worker: 'worker',
    path: '/v1/responses',
    body: { model: MODEL, instructions: 'be brief', input: 'hi' },
  },
  // Refusals: the error shape (issue #19 item 3 relays a 4xx's error.message).
  { name: 'chat, a float max_tokens', worker: 'worker', path: '/v1/chat/completions', body: chat('x', { max_tokens: 2.5 }), status: 400 },
  { name: 'completions, prompt a number', worker: 'worker', path: '/v1/completions', body: { model: MODEL, prompt: 42 }, status: 400 },
  { name: 'responses, input a number', worker: 'worker', path: '/v1/responses', body: { model: MODEL, input: 42 }, status: 400 },
  {
    name: 'generate without sampling_params',
    worker: 'worker',
    path: '/inference/v1/generate',
    body: { model: MODEL, token_ids: tokens },
    status: 400,
  },
  // Passthrough APIs (decode).
  { name: 'models', worker: 'worker', method: 'GET', path: '/v1/models' },
  { name: 'tokenize', worker: 'worker', path: '/tokenize', body: { model: MODEL, prompt: 'hello there' } },
  { name: 'embeddings', worker: 'worker', path: '/v1/embeddings', body: { model: MODEL, input: 'hello there' } },
  {
    name: 'messages',
    worker: 'worker',
    path: '/v1/messages',
    body: { model: MODEL, max_tokens: 10, system: 'be brief', messages: [{ role: 'user', content: 'hello there' }] },
  },
  {
    name: 'messages without max_tokens',
    worker: 'worker',
    path: '/v1/messages',
    body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }] },
    status: 400,
  },
  { name: 'an unknown path', worker: 'worker', path: '/v1/nothing-here', body: {}, status: 404 },
  // The encoder (encode step: OpenAI wire, and the generate wire with use_openai_format: false).
  { name: 'encode, chat', worker: 'encode', path: '/v1/chat/completions', body: imageChat({ max_tokens: 1 }) },
  {
    name: 'encode, responses',
    worker: 'encode',
    path: '/v1/responses',
    body: { model: MODEL, max_output_tokens: 1, input: [{ role: 'user', content: [{ type: 'input_image', image_url: image }] }] },
  },
  {
    name: 'encode, generate',
    worker: 'encode',
    path: '/inference/v1/generate',
    body: generate(
      {
        features: {
          mm_hashes: { image: ['parity-hash-0'] },
          mm_placeholders: { image: [{ offset: 1, length: 3 }] },
          kwargs_data: { image: ['dGVuc29y'] },
        },
      },
      { max_tokens: 1 },
    ),
  },
];

suite(`sim/ against llm-d-inference-sim: same requests, same statuses and body shapes${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let dir: string;
  const real: Partial<Record<Worker, { port: number; child: Child }>> = {};
  const ours: Partial<Record<Worker, Simulator>> = {};

  /**
   * One llm-d-inference-sim, up once /health answers. A free port can be taken between the probe and
   * the bind (other suites start processes meanwhile): then it exits, and another port is tried.
   */
  async function startReal(worker: Worker, role: 'render' | 'decode' | 'encode'): Promise<{ port: number; child: Child }> {
    const logPath = join(dir, `${worker}.log`);
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      const child = await startChild({
        name: `real-${worker}`,
        command: peerBin('llm-d-inference-sim'),
        args: simArgv(role, port, []),
        logPath,
        ready: /^/,
        env: { ...process.env, GOMAXPROCS: '1' },
      });
      const up = await waitUntil(
        async () => {
          if (!child.isRunning()) throw new Error('exited');
          return fetch(`http://127.0.0.1:${port}/health`).then(
            (res) => res.ok,
            () => false,
          );
        },
        `llm-d-inference-sim (${worker}) /health`,
        30_000,
        100,
      ).then(
        () => true,
        async (err: Error) => {
          await child.stop(1000);
          if (attempt >= 3)
            throw new Error(`llm-d-inference-sim (${worker}): ${err.message}; log:\n${readFileSync(logPath, 'utf8').slice(-2000)}`);
          return false;
        },
      );
      if (up) return { port, child };
    }
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-parity-'));
    const roles = { render: 'render', worker: 'decode', encode: 'encode' } as const;
    for (const worker of ['render', 'worker', 'encode'] as const) {
      real[worker] = await startReal(worker, roles[worker]);
      ours[worker] = await startSimulator({ name: `sim-${worker}`, role: roles[worker], port: 0 });
    }
  }, 120_000);

  afterAll(async () => {
    for (const r of Object.values(real)) await r.child.stop(3000);
    for (const s of Object.values(ours)) await s.close();
    if (dir && !process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  });

  async function send(base: string, probe: Probe, id: string): Promise<AnswerShape> {
    const res = await fetch(base + probe.path, {
      method: probe.method ?? 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': id, ...probe.headers },
      ...(probe.body === undefined ? {} : { body: JSON.stringify(probe.body) }),
      signal: AbortSignal.timeout(10_000),
    });
    return answerShape(res);
  }

  let seq = 0;
  it.each(PROBES.map((p) => [`${p.worker} ${p.method ?? 'POST'} ${p.path}: ${p.name}`, p] as const))('%s', async (_title, probe) => {
    const id = `parity-${++seq}`;
    const theirs = await send(`http://127.0.0.1:${real[probe.worker]!.port}`, probe, id);
    const mine = await send(ours[probe.worker]!.url, probe, id);
    if (probe.status !== undefined) expect(theirs.status).toBe(probe.status);
    const allowed = ALLOWED[probe.name];
    if (allowed && mine.body === 'json' && typeof mine.shape === 'object' && !Array.isArray(mine.shape)) {
      const shape = { ...(mine.shape as Record<string, Shape>) };
      for (const key of allowed.keys) {
        expect(shape).toHaveProperty(key); // still there: else the entry is stale
        delete shape[key];
      }
      expect({ ...mine, shape }).toEqual(theirs);
    } else expect(mine).toEqual(theirs);
  });
});
