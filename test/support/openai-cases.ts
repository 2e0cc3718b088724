/**
 * The OpenAI SDK conformance cases (issue #19 item 1), written once and run by two suites: against
 * our simulators behind the real Envoy (test/e2e/openai-sdk.test.ts) and against the real peers
 * (test/peers/openai-sdk.test.ts). The client is the official `openai` package with
 * `maxRetries: 0`, so that none of the SDK's own retries hides a failure.
 *
 * Each case checks what the SDK user sees (the parsed answer, the error class, its message, the
 * request id) and, where the target can tell, what the workers received.
 */
import OpenAI, { APIError, BadRequestError, InternalServerError, NotFoundError, RateLimitError } from 'openai';
import { uniqueImage } from './unique-image';

export type WorkerRole = 'encode' | 'prefill' | 'decode';

/** One request as a worker received it. */
export interface WorkerLeg {
  readonly path: string;
  /** Lower-cased names. */
  readonly headers: Readonly<Record<string, string>>;
  readonly json: unknown;
}

/** What a failing prefill worker answered, to be found nowhere in the client's answer. */
export interface PrefillFailure {
  /** Text of the worker's body that must not reach the client. */
  readonly upstreamText: string;
  restore(): Promise<void>;
}

export interface ConformanceTarget {
  /** Envoy's public listener. */
  readonly publicUrl: string;
  /** The model the workers serve. */
  readonly model: string;
  /**
   * The generation legs of request `id` that reached workers of `role` (not the conditional-decode
   * probe, which the EPP or its stand-in answered 412), once at least `atLeast` are there.
   */
  legs(role: WorkerRole, id: string, atLeast: number): Promise<WorkerLeg[]>;
  /** Every request to any worker (render included, when the target can see it) that carried `id`, now. */
  anyLegs(id: string): Promise<WorkerLeg[]>;
  /** Makes every prefill leg fail with a rate limit (429) or a server error (5xx) until `restore()`. */
  failPrefill(kind: 'rate-limit' | 'server-error'): Promise<PrefillFailure>;
}

/** What differs between targets before any of them runs (test titles are fixed then). */
export interface CaseOptions {
  /**
   * `/tokenize` is on the path allow-list but the router in front of the workers cannot route it:
   * its status and a phrase of its answer, and why.
   */
  readonly tokenizeRefusedBy?: { readonly status: number; readonly says: string; readonly why: string };
}

let seq = 0;
/** A request id, also the first word of the prompt: prompts never share a prefix (no conditional-decode hits). */
const nextId = (what: string): string => `sdk-${what}-${process.pid}-${++seq}`;

function client(target: ConformanceTarget): OpenAI {
  return new OpenAI({ baseURL: `${target.publicUrl}/v1`, apiKey: 'x', maxRetries: 0, timeout: 20_000 });
}

const withId = (id: string) => ({ headers: { 'x-request-id': id } });

const obj = (v: unknown): Record<string, unknown> => v as Record<string, unknown>;

/** The error a call rejected with (it must reject). */
async function rejection(call: () => Promise<unknown>): Promise<APIError> {
  try {
    await call();
  } catch (err) {
    if (err instanceof APIError) return err;
    throw err;
  }
  throw new Error('the call succeeded; an APIError was expected');
}

/** Defines the cases inside the caller's describe block; `target()` is read once its beforeAll ran. */
export function defineOpenAiConformanceCases(target: () => ConformanceTarget, opts: CaseOptions = {}): void {
  let sdk: OpenAI;
  let t: ConformanceTarget;
  beforeAll(() => {
    t = target();
    sdk = client(t);
  });

  describe('chat', () => {
    it('plain: the answer, the request id in the response headers and on every leg (prefill then decode)', async () => {
      const id = nextId('chat');
      const { data, response, request_id } = await sdk.chat.completions
        .create({ model: t.model, messages: [{ role: 'user', content: `${id} hello from the sdk` }] }, withId(id))
        .withResponse();
      expect(data.object).toBe('chat.completion');
      expect(data.choices[0]!.message).toMatchObject({ role: 'assistant', content: `${id} hello from the sdk` });
      expect(data.usage?.prompt_tokens).toBeGreaterThan(0);
      expect(response.headers.get('x-request-id')).toBe(id);
      expect(request_id).toBe(id);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(prefill!.path).toBe('/v1/chat/completions');
      expect(obj(prefill!.json)['kv_transfer_params']).toMatchObject({ do_remote_decode: true });
      const [decode] = await t.legs('decode', id, 1);
      expect(obj(decode!.json)['kv_transfer_params']).toMatchObject({ do_remote_prefill: true });
    });

    it('a request id is made up when the client sends none, and it is the one the workers saw', async () => {
      const text = `${nextId('chat-noid')} who am i`;
      const { response } = await sdk.chat.completions
        .create({ model: t.model, messages: [{ role: 'user', content: text }] })
        .withResponse();
      const id = response.headers.get('x-request-id');
      expect(id).toMatch(/^[A-Za-z0-9-]{8,}$/);
      const [decode] = await t.legs('decode', id!, 1);
      expect(decode!.headers['x-request-id']).toBe(id);
    });

    it('streamed: the deltas make up the answer, without a usage chunk', async () => {
      const id = nextId('chat-stream');
      const words = `${id} one two three four five`;
      const stream = await sdk.chat.completions.create(
        { model: t.model, stream: true, messages: [{ role: 'user', content: words }] },
        withId(id),
      );
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      expect(chunks.length).toBeGreaterThan(2);
      expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(words);
      expect(chunks.at(-1)!.choices[0]?.finish_reason).toBe('stop');
      expect(chunks.every((c) => !c.usage)).toBe(true);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(obj(prefill!.json)['stream']).toBe(false);
      const [decode] = await t.legs('decode', id, 1);
      expect(obj(decode!.json)['stream']).toBe(true);
    });

    it('stream_options.include_usage: the usage arrives in the last chunk, which has no choices', async () => {
      const id = nextId('chat-usage');
      const words = `${id} count these words please`;
      const stream = await sdk.chat.completions.create(
        { model: t.model, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: words }] },
        withId(id),
      );
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      const last = chunks.at(-1)!;
      expect(last.choices).toEqual([]);
      expect(last.usage).toMatchObject({ prompt_tokens: expect.any(Number), completion_tokens: expect.any(Number) });
      expect(last.usage!.completion_tokens).toBeGreaterThan(0);
      expect(last.usage!.total_tokens).toBe(last.usage!.prompt_tokens + last.usage!.completion_tokens);
      expect(chunks.slice(0, -1).every((c) => !c.usage)).toBe(true);
      expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(words);
    });

    it('max_completion_tokens: the answer stops there (finish_reason length); decode got the limit, prefill one token', async () => {
      const id = nextId('chat-max');
      const data = await sdk.chat.completions.create(
        { model: t.model, max_completion_tokens: 2, messages: [{ role: 'user', content: `${id} a b c d e f g h` }] },
        withId(id),
      );
      expect(data.choices[0]!.finish_reason).toBe('length');
      const [decode] = await t.legs('decode', id, 1);
      expect(obj(decode!.json)['max_completion_tokens']).toBe(2);
      const [prefill] = await t.legs('prefill', id, 1);
      const p = obj(prefill!.json);
      expect(p['max_completion_tokens'] ?? p['max_tokens']).toBe(1);
    });

    it('an image as a data URL: one encode leg, its ec_transfer_params on prefill, the text answered', async () => {
      const id = nextId('chat-image');
      const data = await sdk.chat.completions.create(
        {
          model: t.model,
          max_tokens: 20,
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: `${id} describe the picture` },
                { type: 'image_url', image_url: { url: uniqueImage() } },
              ],
            },
          ],
        },
        withId(id),
      );
      expect(data.choices[0]!.message.content).toContain('describe the picture');
      const encodes = await t.legs('encode', id, 1);
      expect(encodes).toHaveLength(1);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(Object.keys(obj(obj(prefill!.json)['ec_transfer_params']))).toHaveLength(1);
    });

    it('tools and response_format reach the decode worker as the client sent them', async () => {
      const id = nextId('chat-tools');
      const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'The weather in a city',
            parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
          },
        },
      ];
      const responseFormat = { type: 'json_object' as const };
      const data = await sdk.chat.completions.create(
        {
          model: t.model,
          tools,
          tool_choice: 'none',
          response_format: responseFormat,
          messages: [{ role: 'user', content: `${id} what is the weather in Paris` }],
        },
        withId(id),
      );
      expect(data.choices[0]!.message.role).toBe('assistant');
      const [decode] = await t.legs('decode', id, 1);
      expect(obj(decode!.json)['tools']).toEqual(tools);
      expect(obj(decode!.json)['tool_choice']).toBe('none');
      expect(obj(decode!.json)['response_format']).toEqual(responseFormat);
    });
  });

  describe('completions', () => {
    /** The token ids decode got: render's for a text prompt. Echo workers answer them as `"1,2,3"`. */
    async function decodePrompt(id: string): Promise<number[]> {
      const [decode] = await t.legs('decode', id, 1);
      const prompt = obj(decode!.json)['prompt'] as number[];
      expect(prompt.length).toBeGreaterThan(1);
      expect(prompt.every((x) => Number.isInteger(x))).toBe(true);
      return prompt;
    }

    it('a string prompt: rendered to token ids for prefill and decode', async () => {
      const id = nextId('cmpl');
      const data = await sdk.completions.create({ model: t.model, prompt: `${id} complete me` }, withId(id));
      expect(data.object).toBe('text_completion');
      const [prefill] = await t.legs('prefill', id, 1);
      expect(prefill!.path).toBe('/v1/completions');
      const ids = await decodePrompt(id);
      expect(obj(prefill!.json)['prompt']).toEqual(ids);
      expect(data.choices[0]!.text).toBe(ids.join(','));
      expect(data.usage?.prompt_tokens).toBe(ids.length);
    });

    it('token ids as the prompt: forwarded as they are', async () => {
      const id = nextId('cmpl-ids');
      // Distinct ids per run, so that the prefix never matched before.
      const ids = Array.from({ length: 8 }, (_, i) => 1000 + ((process.pid * 7 + seq * 37 + i * 11) % 30000));
      const data = await sdk.completions.create({ model: t.model, prompt: ids }, withId(id));
      expect(await decodePrompt(id)).toEqual(ids);
      expect(data.choices[0]!.text).toBe(ids.join(','));
      expect(data.usage?.prompt_tokens).toBe(ids.length);
    });

    it('streamed: the pieces make up the answer', async () => {
      const id = nextId('cmpl-stream');
      const stream = await sdk.completions.create({ model: t.model, prompt: `${id} stream these words back`, stream: true }, withId(id));
      const parts: string[] = [];
      for await (const chunk of stream) parts.push(chunk.choices[0]?.text ?? '');
      expect(parts.length).toBeGreaterThan(2);
      expect(parts.join('')).toBe((await decodePrompt(id)).join(','));
    });
  });

  describe('the Responses API', () => {
    it('plain: output_text, status completed; prefill and decode legs on /v1/responses', async () => {
      const id = nextId('resp');
      const { data, response } = await sdk.responses
        .create({ model: t.model, input: `${id} hello responses`, max_output_tokens: 20 }, withId(id))
        .withResponse();
      expect(data.object).toBe('response');
      expect(data.status).toBe('completed');
      expect(data.output_text).toBe(`${id} hello responses`);
      expect(response.headers.get('x-request-id')).toBe(id);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(prefill!.path).toBe('/v1/responses');
      expect(obj(prefill!.json)['kv_transfer_params']).toMatchObject({ do_remote_decode: true });
      const [decode] = await t.legs('decode', id, 1);
      expect(decode!.path).toBe('/v1/responses');
      expect(obj(decode!.json)['max_output_tokens']).toBe(20);
    });

    it('instructions and input items', async () => {
      const id = nextId('resp-items');
      const data = await sdk.responses.create(
        {
          model: t.model,
          instructions: 'answer briefly',
          input: [{ role: 'user', content: [{ type: 'input_text', text: `${id} items please` }] }],
        },
        withId(id),
      );
      expect(data.status).toBe('completed');
      expect(data.output_text).toContain('items please');
    });

    it('streamed: output_text deltas, then response.completed', async () => {
      const id = nextId('resp-stream');
      const words = `${id} one two three four`;
      const stream = await sdk.responses.create({ model: t.model, input: words, stream: true }, withId(id));
      const events = [];
      for await (const event of stream) events.push(event);
      const types = events.map((e) => e.type);
      expect(types).toContain('response.output_text.delta');
      expect(types.at(-1)).toBe('response.completed');
      const deltas = events.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.delta] : []));
      expect(deltas.join('')).toBe(words);
      const completed = events.at(-1)!;
      expect(completed.type === 'response.completed' && completed.response.status).toBe('completed');
    });

    it('input_image parts: one encode leg on /v1/responses with the image; prefill and decode get it too', async () => {
      const id = nextId('resp-image');
      const url = uniqueImage();
      const data = await sdk.responses.create(
        {
          model: t.model,
          max_output_tokens: 20,
          input: [
            {
              role: 'user',
              content: [
                { type: 'input_text', text: `${id} what is in this image` },
                { type: 'input_image', image_url: url, detail: 'auto' },
              ],
            },
          ],
        },
        withId(id),
      );
      expect(data.status).toBe('completed');
      expect(data.output_text).toContain('what is in this image');
      // llm-d-inference-sim's Responses route answers no ec_transfer_params (test/peers/sim-parity.test.ts):
      // what is checked is that the image went to the encoder and on.
      const encodes = await t.legs('encode', id, 1);
      expect(encodes).toHaveLength(1);
      expect(encodes[0]!.path).toBe('/v1/responses');
      expect(JSON.stringify(encodes[0]!.json)).toContain(url);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(JSON.stringify(prefill!.json)).toContain(url);
      const [decode] = await t.legs('decode', id, 1);
      expect(JSON.stringify(decode!.json)).toContain(url);
    });
  });

  describe('passthrough APIs', () => {
    it('models.list returns the served model', async () => {
      const page = await sdk.models.list();
      expect(page.data.map((m) => m.id)).toContain(t.model);
      for (const m of page.data) expect(m.object).toBe('model');
    });

    it('embeddings', async () => {
      const id = nextId('embed');
      const data = await sdk.embeddings.create({ model: t.model, input: `${id} embed me`, encoding_format: 'float' }, withId(id));
      expect(data.object).toBe('list');
      expect(data.data).toHaveLength(1);
      expect(data.data[0]!.embedding.length).toBeGreaterThan(0);
      expect(data.data[0]!.embedding.every((x) => typeof x === 'number')).toBe(true);
      const [decode] = await t.legs('decode', id, 1);
      expect(decode!.path).toBe('/v1/embeddings');
    });

    const tokenize = () =>
      fetch(`${t.publicUrl}/tokenize`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: t.model, prompt: 'count my tokens' }),
      });
    if (opts.tokenizeRefusedBy === undefined) {
      it('/tokenize (a plain fetch: the SDK has no method for it)', async () => {
        const res = await tokenize();
        const text = await res.text();
        expect({ status: res.status, text }).toEqual({ status: 200, text: expect.stringContaining('"count"') });
        const body = obj(JSON.parse(text));
        expect(body['count']).toBeGreaterThan(0);
        expect(body['tokens']).toHaveLength(body['count'] as number);
      });
    } else {
      const refusal = opts.tokenizeRefusedBy;
      it(`/tokenize is refused by the router, not by us (${refusal.why}): a 4xx that says so`, async () => {
        const res = await tokenize();
        const text = await res.text();
        expect({ status: res.status, text }).toEqual({ status: refusal.status, text: expect.stringContaining(refusal.says) });
      });
    }
  });

  describe('errors', () => {
    /** The refusal: the SDK class, a message naming the field, the request id, and no worker saw it. */
    async function expectRefused(
      call: (id: string) => Promise<unknown>,
      klass: typeof BadRequestError | typeof NotFoundError,
      message: RegExp,
    ): Promise<APIError> {
      const id = nextId('bad');
      const err = await rejection(() => call(id));
      expect(err).toBeInstanceOf(klass);
      expect(err.message).toMatch(message);
      expect(err.error).toMatchObject({ message: expect.any(String), type: expect.any(String) });
      expect(err.headers?.get('x-request-id')).toBe(id);
      expect(await t.anyLegs(id)).toEqual([]);
      return err;
    }

    const chatWith = (extra: Record<string, unknown>) => (id: string) =>
      sdk.chat.completions.create({ model: t.model, messages: [{ role: 'user', content: id }], ...extra } as never, withId(id));

    it.each([
      ['messages not an array', { messages: 'hello' }, /messages/],
      ['an empty messages array', { messages: [] }, /messages/],
      ['a message without a role', { messages: [{ content: 'hi' }] }, /messages\[0\]\.role|role/],
      ['a message whose role is not a string', { messages: [{ role: 7, content: 'hi' }] }, /role/],
      ['a content part of an unknown type', { messages: [{ role: 'user', content: [{ type: 'bogus', text: 'x' }] }] }, /content/],
      ['a text part whose text is not a string', { messages: [{ role: 'user', content: [{ type: 'text', text: 42 }] }] }, /text/],
      ['n above its limit', { n: 129 }, /\bn\b/],
      ['a float max_tokens', { max_tokens: 2.5 }, /max_tokens/],
      ['a negative max_completion_tokens', { max_completion_tokens: -1 }, /max_completion_tokens/],
    ])('chat with %s: BadRequestError naming the field, before any worker', async (_what, extra, message) => {
      await expectRefused(chatWith(extra), BadRequestError, message);
    });

    it.each([
      ['a number', 42],
      ['an object', { text: 'hi' }],
      ['a list of mixed strings and numbers', ['a', 1]],
    ])('completions with prompt as %s: BadRequestError naming prompt', async (_what, prompt) => {
      await expectRefused(
        (id) => sdk.completions.create({ model: t.model, prompt: prompt as never, max_tokens: 5 }, withId(id)),
        BadRequestError,
        /prompt/,
      );
    });

    it('responses with input neither a string nor an array: BadRequestError naming input', async () => {
      await expectRefused((id) => sdk.responses.create({ model: t.model, input: 42 as never }, withId(id)), BadRequestError, /input/);
    });

    it('responses with a float max_output_tokens: BadRequestError naming it', async () => {
      await expectRefused(
        (id) => sdk.responses.create({ model: t.model, input: 'hi', max_output_tokens: 1.5 }, withId(id)),
        BadRequestError,
        /max_output_tokens/,
      );
    });

    it.each(['/chat/completions/render', '/completions/render', '/responses/render'])(
      'POST %s (a worker control path): NotFoundError, no worker reached',
      async (path) => {
        const id = nextId('refused');
        const err = await rejection(() =>
          sdk.post(path, { body: { model: t.model, messages: [{ role: 'user', content: 'hi' }] }, headers: { 'x-request-id': id } }),
        );
        expect(err).toBeInstanceOf(NotFoundError);
        expect(err.message).toMatch(/not found/i);
        expect(await t.anyLegs(id)).toEqual([]);
      },
    );

    it('GET /metrics through the SDK: NotFoundError', async () => {
      const metrics = new OpenAI({ baseURL: t.publicUrl, apiKey: 'x', maxRetries: 0 });
      const err = await rejection(() => metrics.get('/metrics'));
      expect(err).toBeInstanceOf(NotFoundError);
    });

    it('a 429 from the prefill worker: RateLimitError naming the step and the status, with the request id', async () => {
      const failure = await t.failPrefill('rate-limit');
      try {
        const id = nextId('ratelimit');
        const err = await rejection(() =>
          sdk.chat.completions.create({ model: t.model, messages: [{ role: 'user', content: `${id} hi` }] }, withId(id)),
        );
        expect(err).toBeInstanceOf(RateLimitError);
        expect(err.status).toBe(429);
        expect(err.message).toMatch(/prefill/);
        expect(err.message).toMatch(/429/);
        expect(err.headers?.get('x-request-id')).toBe(id);
        expect(err.requestID).toBe(id);
      } finally {
        await failure.restore();
      }
    });

    it("a 5xx from the prefill worker: InternalServerError in our shape, none of the worker's body", async () => {
      const failure = await t.failPrefill('server-error');
      try {
        const id = nextId('servererror');
        const err = await rejection(() =>
          sdk.chat.completions.create({ model: t.model, messages: [{ role: 'user', content: `${id} hi` }] }, withId(id)),
        );
        expect(err).toBeInstanceOf(InternalServerError);
        expect(err.status).toBeGreaterThanOrEqual(500);
        expect(err.message).not.toContain(failure.upstreamText);
        expect(JSON.stringify(err.error)).not.toContain(failure.upstreamText);
        expect(err.error).toMatchObject({ message: expect.stringMatching(/\(request_id: [A-Za-z0-9-]+\)$/), type: expect.any(String) });
        expect(err.headers?.get('x-request-id')).toBe(id);
      } finally {
        await failure.restore();
      }
    });

    it('after the injected failures, the same request succeeds again', async () => {
      const id = nextId('recovered');
      const data = await sdk.chat.completions.create({ model: t.model, messages: [{ role: 'user', content: `${id} ok` }] }, withId(id));
      expect(data.choices[0]!.message.content).toBe(`${id} ok`);
    });

    // Last: before the request limits (issue #19 item 4) these went through and crashed the worker
    // (llm-d-inference-sim panics in makeslice), which would fail every later case.
    it('chat with n beyond 2^53 (the value that crashes a worker): BadRequestError naming n', async () => {
      await expectRefused(chatWith({ n: 9007199254740992 }), BadRequestError, /\bn\b/);
    });

    it('completions with n beyond 2^53 (the value that crashes a worker): BadRequestError naming n', async () => {
      await expectRefused(
        (id) => sdk.completions.create({ model: t.model, prompt: 'x', n: 9007199254740992 }, withId(id)),
        BadRequestError,
        /\bn\b/,
      );
    });
  });
}
