/** The passthrough-API and error cases of the OpenAI SDK conformance suite. */
import OpenAI, { APIError, BadRequestError, InternalServerError, NotFoundError, RateLimitError } from 'openai';
import { nextId, obj, openAiClient, rejection, withId, type CaseOptions, type ConformanceTarget } from './openai-target';

export function defineApiCases(target: () => ConformanceTarget, opts: CaseOptions): void {
  let sdk: OpenAI;
  let t: ConformanceTarget;
  beforeAll(() => {
    t = target();
    sdk = openAiClient(t);
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
      ['messages not an array', { messages: 'hello' }, /\bmessages must be a non-empty array/],
      ['an empty messages array', { messages: [] }, /\bmessages must be a non-empty array/],
      ['a message without a role', { messages: [{ content: 'hi' }] }, /messages\[0\]\.role must be a string/],
      ['a message whose role is not a string', { messages: [{ role: 7, content: 'hi' }] }, /messages\[0\]\.role must be a string/],
      [
        'a content part of an unknown type',
        { messages: [{ role: 'user', content: [{ type: 'bogus', text: 'x' }] }] },
        /messages\[0\]\.content\[0\]\.type "bogus" is not a known/,
      ],
      [
        'a text part whose text is not a string',
        { messages: [{ role: 'user', content: [{ type: 'text', text: 42 }] }] },
        /messages\[0\]\.content\[0\]\.text must be a string/,
      ],
      ['n above its limit', { n: 129 }, /(^|\s)n must be an integer from \d+ to 128, got 129/],
      ['a float max_tokens', { max_tokens: 2.5 }, /\bmax_tokens must be an integer/],
      ['a negative max_completion_tokens', { max_completion_tokens: -1 }, /\bmax_completion_tokens must be an integer/],
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
        /\bprompt must be a string, an array of strings, or an array of token ids/,
      );
    });

    it('responses with input neither a string nor an array: BadRequestError naming input', async () => {
      await expectRefused(
        (id) => sdk.responses.create({ model: t.model, input: 42 as never }, withId(id)),
        BadRequestError,
        /\binput must be a string or an array/,
      );
    });

    it('responses with a float max_output_tokens: BadRequestError naming it', async () => {
      await expectRefused(
        (id) => sdk.responses.create({ model: t.model, input: 'hi', max_output_tokens: 1.5 }, withId(id)),
        BadRequestError,
        /\bmax_output_tokens must be an integer/,
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

    it("a 429 from the prefill worker: RateLimitError naming the step and the status, with the worker's message and the request id", async () => {
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
        // A worker's 4xx message is relayed (the one exception to "upstream bodies never reach the client").
        expect(err.message).toContain(failure.upstreamText);
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
      await expectRefused(chatWith({ n: 9007199254740992 }), BadRequestError, /(^|\s)n must be an integer .*got 9007199254740992/);
    });

    it('completions with n beyond 2^53 (the value that crashes a worker): BadRequestError naming n', async () => {
      await expectRefused(
        (id) => sdk.completions.create({ model: t.model, prompt: 'x', n: 9007199254740992 }, withId(id)),
        BadRequestError,
        /(^|\s)n must be an integer .*got 9007199254740992/,
      );
    });
  });
}
