import { ConfigError } from '../../../../src/config/errors';
import {
  BadRequestError,
  CancelledError,
  TransportError,
  UpstreamError,
  UpstreamInvalidError,
  classify,
} from '../../../../src/pipeline/errors';
import { createRenderStep } from '../../../../src/steps/render';
import type { Step, StepParams } from '../../../../src/pipeline/step';
import type { JsonObject } from '../../../../src/pipeline/context';
import { chatBodyWithImages, makeCtx, useFakeUpstreams } from '../fake-upstream';

const up = useFakeUpstreams();
const { renderService, gateway } = up;

function render(params: StepParams = {}): Step {
  return createRenderStep({ address: renderService.url, ...params }, up.td.deps);
}

/** A chat render answer for `n` images: 9 token ids, placeholders of length 3 from offset 1. */
function chatAnswer(n: number, tokenCount = 9): JsonObject {
  const idx = [...Array(n).keys()];
  return {
    token_ids: [...Array(tokenCount).keys()].map((i) => 100 + i),
    features: {
      mm_hashes: { image: idx.map((i) => `hash-${i}`) },
      mm_placeholders: { image: idx.map((i) => ({ offset: 1 + 3 * i, length: 3 })) },
      kwargs_data: { image: idx.map((i) => (i === 1 ? null : `kw-${i}`)) },
    },
    request_id: 'ignored',
    sampling_params: { ignored: true },
  };
}

function seedEntries(n: number) {
  return [...Array(n).keys()].map((i) => ({ index: i, base64Data: 'AAA', contentType: 'image/png' }));
}

describe('render: chat', () => {
  it('posts the whole body to <address>/v1/chat/completions/render and fills tokens and entries', async () => {
    renderService.respond = () => ({ body: chatAnswer(2) });
    const body = chatBodyWithImages(2, { stream: true, max_tokens: 20 });
    const before = JSON.stringify(body);
    const ctx = makeCtx({
      body,
      entries: seedEntries(2),
      requestId: 'sanitised-id',
      headers: {
        'x-request-id': 'raw client id!',
        authorization: 'Bearer t',
        'epp-profile': 'decode',
        'content-type': 'text/plain',
        host: 'h',
      },
    });
    await render().execute(ctx);

    expect(renderService.seen).toHaveLength(1);
    const req = renderService.seen[0]!;
    expect(req.method).toBe('POST');
    expect(req.path).toBe('/v1/chat/completions/render');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['authorization']).toBe('Bearer t');
    // Only the client's raw id; no coordinator-stamped id, no EPP profile, as upstream sends.
    expect(req.headers['x-request-id']).toBe('raw client id!');
    expect(req.headers['epp-profile']).toBeUndefined();
    expect(req.json).toEqual(JSON.parse(before));

    expect(ctx.tokenIds).toEqual([100, 101, 102, 103, 104, 105, 106, 107, 108]);
    expect(ctx.multimodalEntries).toEqual([
      { index: 0, base64Data: 'AAA', contentType: 'image/png', hash: 'hash-0', kwargsData: 'kw-0', placeholder: { offset: 1, length: 3 } },
      { index: 1, base64Data: 'AAA', contentType: 'image/png', hash: 'hash-1', kwargsData: '', placeholder: { offset: 4, length: 3 } },
    ]);
    expect(JSON.stringify(ctx.body)).toBe(before);
    expect(gateway.seen).toHaveLength(0);
  });

  it('sends no x-request-id at all when the client sent none', async () => {
    renderService.respond = () => ({ body: chatAnswer(0) });
    await render().execute(makeCtx({ requestId: 'generated-uuid' }));
    expect(renderService.seen[0]!.headers['x-request-id']).toBeUndefined();
  });

  it('runs for a text-only request', async () => {
    renderService.respond = () => ({ body: { token_ids: [1, 2, 3] } });
    const ctx = makeCtx({ body: { model: 'm', messages: [{ role: 'user', content: 'hi' }] } });
    await render().execute(ctx);
    expect(renderService.seen).toHaveLength(1);
    expect(ctx.tokenIds).toEqual([1, 2, 3]);
    expect(ctx.multimodalEntries).toEqual([]);
  });

  it('rejects too many total tokens with a 400 naming the counts', async () => {
    renderService.respond = () => ({ body: chatAnswer(0, 10) });
    const p = render({ max_total_tokens: 5 }).execute(makeCtx());
    await expect(p).rejects.toThrow(BadRequestError);
    await expect(p).rejects.toThrow('too many total tokens: got 10, max 5');
  });

  it('accepts an integral float limit (5.0) as 5', async () => {
    renderService.respond = () => ({ body: chatAnswer(0, 5) });
    await expect(render({ max_total_tokens: 5.0 }).execute(makeCtx())).resolves.toBeUndefined();
    renderService.respond = () => ({ body: chatAnswer(0, 6) });
    await expect(render({ max_total_tokens: 5.0 }).execute(makeCtx())).rejects.toThrow('got 6, max 5');
  });

  it('rejects too many placeholder tokens (4 + 3 > 5)', async () => {
    renderService.respond = () => ({
      body: {
        token_ids: [1, 2, 3, 4, 5, 6, 7, 8],
        features: {
          mm_hashes: { image: ['a', 'b'] },
          mm_placeholders: {
            image: [
              { offset: 0, length: 4 },
              { offset: 4, length: 3 },
            ],
          },
          kwargs_data: { image: ['k', 'k'] },
        },
      },
    });
    const p = render({ max_total_placeholder_tokens: 5 }).execute(makeCtx({ body: chatBodyWithImages(2), entries: seedEntries(2) }));
    await expect(p).rejects.toThrow(BadRequestError);
    await expect(p).rejects.toThrow('too many placeholder tokens: got 7, max 5');
  });

  it('allows placeholders exactly at the limit', async () => {
    renderService.respond = () => ({ body: chatAnswer(1) });
    const ctx = makeCtx({ body: chatBodyWithImages(1), entries: seedEntries(1) });
    await expect(render({ max_total_placeholder_tokens: 3 }).execute(ctx)).resolves.toBeUndefined();
  });

  it.each([
    [
      'mm_hashes',
      {
        mm_hashes: { image: ['a'] },
        mm_placeholders: {
          image: [
            { offset: 1, length: 1 },
            { offset: 2, length: 1 },
          ],
        },
        kwargs_data: { image: ['k', 'k'] },
      },
      'render returned 1 mm_hashes but expected 2',
    ],
    [
      'mm_placeholders',
      { mm_hashes: { image: ['a', 'b'] }, mm_placeholders: { image: [] }, kwargs_data: { image: ['k', 'k'] } },
      'render returned 0 mm_placeholders but expected 2',
    ],
    [
      'kwargs_data',
      {
        mm_hashes: { image: ['a', 'b'] },
        mm_placeholders: {
          image: [
            { offset: 1, length: 1 },
            { offset: 2, length: 1 },
          ],
        },
      },
      'render returned 0 kwargs_data but expected 2',
    ],
  ])('fails with an unusable-answer error (502, upstream_invalid) when %s does not match the images', async (_n, features, msg) => {
    renderService.respond = () => ({ body: { token_ids: [1, 2, 3], features } });
    const p = render().execute(makeCtx({ body: chatBodyWithImages(2), entries: seedEntries(2) }));
    await expect(p).rejects.toThrow(msg);
    await expect(p).rejects.toThrow(UpstreamInvalidError);
    expect(classify(await p.catch((e: unknown) => e), 'r')).toMatchObject({ status: 502, errorClass: 'upstream_invalid' });
  });

  it('a render body that is not JSON is upstream_invalid (502)', async () => {
    renderService.respond = () => ({ body: 'not json' });
    const err = await render()
      .execute(makeCtx({ body: chatBodyWithImages(1), entries: seedEntries(1) }))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamInvalidError);
    expect(classify(err, 'r')).toMatchObject({ status: 502, errorClass: 'upstream_invalid' });
  });

  it('fails a multimodal request without replace-media-urls (no seeded entries) with an upstream_invalid error', async () => {
    renderService.respond = () => ({ body: chatAnswer(1) });
    const p = render().execute(makeCtx({ body: chatBodyWithImages(1) }));
    await expect(p).rejects.toThrow('render returned 1 mm_hashes but expected 0');
  });

  it.each([400, 422, 500])('turns HTTP %d into an UpstreamError for step render (body kept for logs)', async (status) => {
    renderService.respond = () => ({ status, body: 'bad tokens' });
    const err = await render()
      .execute(makeCtx())
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamError);
    expect(err).not.toBeInstanceOf(BadRequestError);
    expect((err as UpstreamError).step).toBe('render');
    expect((err as UpstreamError).status).toBe(status);
    expect((err as UpstreamError).body).toBe('bad tokens');
  });

  it('accepts only 200: a 201 is an UpstreamError too, as upstream', async () => {
    renderService.respond = () => ({ status: 201, body: chatAnswer(0) });
    await expect(render().execute(makeCtx())).rejects.toBeInstanceOf(UpstreamError);
  });

  it('fails with a plain error on an undecodable answer, and reads only the first JSON value', async () => {
    renderService.respond = () => ({ body: 'not json' });
    const p = render().execute(makeCtx());
    await expect(p).rejects.toThrow(Error);
    await expect(p).rejects.not.toThrow(BadRequestError);

    renderService.respond = () => ({ body: '{"token_ids":[7,8]} trailing' });
    const ctx = makeCtx();
    await render().execute(ctx);
    expect(ctx.tokenIds).toEqual([7, 8]);
  });

  it('gives up after `timeout` with a TransportError', async () => {
    renderService.respond = () => new Promise((resolve) => setTimeout(() => resolve({ body: chatAnswer(0) }), 3000));
    const err = await render({ timeout: '100ms' })
      .execute(makeCtx())
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransportError);
    expect((err as TransportError).timedOut).toBe(true);
  });

  it('is cancelled when the client goes away', async () => {
    const ac = new AbortController();
    renderService.respond = () => {
      ac.abort();
      return new Promise((resolve) => setTimeout(() => resolve({ body: chatAnswer(0) }), 3000));
    };
    await expect(render().execute(makeCtx({ signal: ac.signal }))).rejects.toBeInstanceOf(CancelledError);
  });

  it('fails each chat request with a plain error when address is empty, as upstream', async () => {
    const step = createRenderStep({}, up.td.deps);
    const p = step.execute(makeCtx());
    await expect(p).rejects.toThrow("render: service address not configured (set 'address' in render step params)");
    await expect(p).rejects.not.toThrow(BadRequestError);
  });
});

describe('render: unusable address', () => {
  it('fails requests that need the service with a plain error, and still serves generate', async () => {
    const step = createRenderStep({ address: 'not a url' }, up.td.deps);
    const p = step.execute(makeCtx({ path: '/v1/completions', body: { prompt: 'Hello' } }));
    await expect(p).rejects.toThrow(/^render request failed: invalid address/);
    await expect(p).rejects.not.toThrow(BadRequestError);
    const ctx = makeCtx({ path: '/inference/v1/generate', body: { token_ids: [1] } });
    await step.execute(ctx);
    expect(ctx.tokenIds).toEqual([1]);
  });
});

describe('render: completions', () => {
  const path = '/v1/completions';

  it('renders a string prompt via <address>/v1/completions/render and replaces the prompt with the ids', async () => {
    renderService.respond = () => ({ body: [{ token_ids: [11, 12, 13], request_id: 'x' }] });
    const ctx = makeCtx({ path, body: { model: 'm', prompt: 'Hello', max_tokens: 5 } });
    await render().execute(ctx);
    expect(renderService.seen[0]!.path).toBe('/v1/completions/render');
    expect(renderService.seen[0]!.json).toEqual({ model: 'm', prompt: 'Hello', max_tokens: 5 });
    expect(ctx.tokenIds).toEqual([11, 12, 13]);
    expect(ctx.body).toEqual({ model: 'm', prompt: [11, 12, 13], max_tokens: 5 });
  });

  it.each([
    ['no elements', []],
    ['two elements', [{ token_ids: [1] }, { token_ids: [2] }]],
    ['null', null],
  ])('fails with a plain error when the answer has %s', async (_n, answer) => {
    renderService.respond = () => ({ body: answer === null ? 'null' : answer });
    const p = render().execute(makeCtx({ path, body: { prompt: 'Hello' } }));
    await expect(p).rejects.toThrow(/^render: expected 1 response element, got \d$/);
    await expect(p).rejects.not.toThrow(BadRequestError);
  });

  it('rejects too many tokens from a rendered string prompt (7 > 4)', async () => {
    renderService.respond = () => ({ body: [{ token_ids: [1, 2, 3, 4, 5, 6, 7] }] });
    await expect(render({ max_total_tokens: 4 }).execute(makeCtx({ path, body: { prompt: 'Hello' } }))).rejects.toThrow(
      'too many total tokens: got 7, max 4',
    );
  });

  it('takes a token-array prompt as is, without a call', async () => {
    const ctx = makeCtx({ path, body: { model: 'm', prompt: [5, 6, 7.0] } });
    await render().execute(ctx);
    expect(renderService.seen).toHaveLength(0);
    expect(ctx.tokenIds).toEqual([5, 6, 7]);
    expect(ctx.body).toEqual({ model: 'm', prompt: [5, 6, 7] });
  });

  it('takes an empty array as zero tokens, without a call', async () => {
    const ctx = makeCtx({ path, body: { prompt: [] } });
    await render().execute(ctx);
    expect(renderService.seen).toHaveLength(0);
    expect(ctx.tokenIds).toEqual([]);
  });

  it('checks the token limit before the elements (3 > 2)', async () => {
    const p = render({ max_total_tokens: 2 }).execute(makeCtx({ path, body: { prompt: [1, 2, 'x'] } }));
    await expect(p).rejects.toThrow(BadRequestError);
    await expect(p).rejects.toThrow('too many total tokens: got 3, max 2');
  });

  it.each<[string, unknown, string]>([
    ['a bad element', [1, 2, -3], 'invalid token at index 2'],
    ['a fraction', [1, 2.5], 'invalid token at index 1'],
    ['batched strings', ['a', 'b'], 'batched string prompts ([]string) are not supported'],
    ['batched token arrays', [[1], [2]], 'batched token prompts ([][]int) are not supported'],
    ['an object element', [{}], 'invalid prompt array element: object'],
    ['a missing prompt', undefined, 'prompt must be a string or token array'],
    ['a null prompt', null, 'prompt must be a string or token array'],
    ['a number prompt', 42, 'prompt must be a string or token array'],
    ['an object prompt', { a: 1 }, 'prompt must be a string or token array'],
  ])('rejects %s with a 400', async (_n, prompt, msg) => {
    const body: JsonObject = { model: 'm' };
    if (prompt !== undefined) body['prompt'] = prompt;
    const p = render().execute(makeCtx({ path, body }));
    await expect(p).rejects.toThrow(BadRequestError);
    await expect(p).rejects.toThrow(msg);
    expect(renderService.seen).toHaveLength(0);
  });

  it('does not apply the placeholder limit', async () => {
    const ctx = makeCtx({ path, body: { prompt: [1, 2] }, entries: [{ index: 0, placeholder: { offset: 0, length: 100 } }] });
    await expect(render({ max_total_placeholder_tokens: 1 }).execute(ctx)).resolves.toBeUndefined();
  });
});

describe('render: generate', () => {
  const path = '/inference/v1/generate';

  it('takes text-only token ids without a call', async () => {
    const ctx = makeCtx({ path, body: { model: 'm', token_ids: [1, 2, 3, 4], sampling_params: { max_tokens: 10 } } });
    await render().execute(ctx);
    expect(renderService.seen).toHaveLength(0);
    expect(ctx.tokenIds).toEqual([1, 2, 3, 4]);
    expect(ctx.multimodalEntries).toEqual([]);
  });

  it('builds entries from features (one image, kwargs given)', async () => {
    const ctx = makeCtx({
      path,
      body: {
        token_ids: [1, 32000, 32000, 32000, 5],
        features: { mm_hashes: { image: ['h'] }, mm_placeholders: { image: [{ offset: 1, length: 3 }] }, kwargs_data: { image: ['KW'] } },
      },
      entries: [{ index: 7, base64Data: 'stale' }],
    });
    await render().execute(ctx);
    // Replaces, does not merge.
    expect(ctx.multimodalEntries).toEqual([{ index: 0, hash: 'h', kwargsData: 'KW', placeholder: { offset: 1, length: 3 } }]);
  });

  it('builds entries for several images, cache hits as ""', async () => {
    const ctx = makeCtx({
      path,
      body: {
        token_ids: [1, 9, 9, 2, 9, 9, 3],
        features: {
          mm_hashes: { image: ['a', 'b'] },
          mm_placeholders: {
            image: [
              { offset: 1, length: 2 },
              { offset: 4, length: 2 },
            ],
          },
        },
      },
    });
    await render().execute(ctx);
    expect(ctx.multimodalEntries.map((e) => [e.index, e.hash, e.kwargsData])).toEqual([
      [0, 'a', ''],
      [1, 'b', ''],
    ]);
  });

  it.each([
    ['a string', 'x'],
    ['an array', []],
    ['a number', 3],
  ])('rejects features that are %s', async (_n, features) => {
    await expect(render().execute(makeCtx({ path, body: { token_ids: [1], features } }))).rejects.toThrow(BadRequestError);
  });

  it('takes null features as text-only', async () => {
    const ctx = makeCtx({ path, body: { token_ids: [1, 2], features: null } });
    await render().execute(ctx);
    expect(ctx.multimodalEntries).toEqual([]);
  });

  it.each([
    ['offset past the prompt', { offset: 5, length: 1 }],
    ['length of 2^53', { offset: 0, length: 2 ** 53 }],
  ])('rejects a placeholder with %s', async (_n, placeholder) => {
    const body = { token_ids: [1, 2, 3, 4], features: { mm_hashes: { image: ['h'] }, mm_placeholders: { image: [placeholder] } } };
    await expect(render().execute(makeCtx({ path, body }))).rejects.toThrow(BadRequestError);
  });

  it('rejects a placeholder sum over the limit, even at the largest lengths', async () => {
    const big = 2 ** 53 - 1;
    const body = {
      token_ids: [...Array(10).keys()],
      features: {
        mm_hashes: { image: ['a', 'b'] },
        mm_placeholders: {
          image: [
            { offset: 0, length: 1 },
            { offset: 0, length: 1 },
          ],
        },
      },
    };
    await expect(render({ max_total_placeholder_tokens: 1 }).execute(makeCtx({ path, body }))).rejects.toThrow(
      'too many placeholder tokens: got 2, max 1',
    );
    // Lengths this large fail the bounds check first; the limit is never bypassed.
    body.features.mm_placeholders.image = [
      { offset: 0, length: big },
      { offset: 0, length: big },
    ];
    await expect(render({ max_total_placeholder_tokens: 5 }).execute(makeCtx({ path, body }))).rejects.toThrow(BadRequestError);
  });

  it.each([
    ['an array', [1]],
    ['a string', 'greedy'],
  ])('rejects sampling_params that are %s', async (_n, sp) => {
    await expect(render().execute(makeCtx({ path, body: { token_ids: [1], sampling_params: sp } }))).rejects.toThrow(
      'sampling_params must be an object',
    );
  });

  it('rejects extra_args that is not an object', async () => {
    const p = render().execute(makeCtx({ path, body: { token_ids: [1], sampling_params: { extra_args: 'x' } } }));
    await expect(p).rejects.toThrow('sampling_params.extra_args must be an object');
  });

  it.each([
    ['missing', undefined],
    ['empty', []],
    ['not an array', 'abc'],
    ['with a negative id', [1, -2]],
  ])('rejects token_ids %s', async (_n, ids) => {
    const body: JsonObject = { model: 'm' };
    if (ids !== undefined) body['token_ids'] = ids;
    await expect(render().execute(makeCtx({ path, body }))).rejects.toThrow(BadRequestError);
  });

  it('applies the token limit', async () => {
    await expect(render({ max_total_tokens: 2 }).execute(makeCtx({ path, body: { token_ids: [1, 2, 3] } }))).rejects.toThrow(
      'too many total tokens: got 3, max 2',
    );
  });

  it('works without an address (no call is needed)', async () => {
    const ctx = makeCtx({ path, body: { token_ids: [1, 2] } });
    await createRenderStep({}, up.td.deps).execute(ctx);
    expect(ctx.tokenIds).toEqual([1, 2]);
  });

  it('uses the generate branch only for the exact path', async () => {
    renderService.respond = () => ({ body: chatAnswer(0) });
    const ctx = makeCtx({ path: '/prefix/inference/v1/generate', body: { token_ids: [1] } });
    await render().execute(ctx);
    expect(renderService.seen).toHaveLength(0);
    expect(ctx.tokenIds).toBeNull();
  });
});

describe('render: params', () => {
  it('applies the defaults and builds a pooled client for its own address', () => {
    const before = up.td.clientForCalls.length;
    createRenderStep({ address: renderService.url }, up.td.deps);
    expect(up.td.clientForCalls.slice(before)).toEqual([
      { baseUrl: renderService.url, opts: { maxIdleConns: 100, idleTimeoutMs: 90_000 } },
    ]);
  });

  it("passes max_idle_conns_per_host and idle_conn_timeout to the pool as given (the pool reads 0 as Go's default, 2)", () => {
    const before = up.td.clientForCalls.length;
    createRenderStep({ address: renderService.url, max_idle_conns_per_host: 7, idle_conn_timeout: '5s' }, up.td.deps);
    createRenderStep({ address: renderService.url, max_idle_conns_per_host: 0 }, up.td.deps);
    expect(up.td.clientForCalls.slice(before).map((c) => c.opts)).toEqual([
      { maxIdleConns: 7, idleTimeoutMs: 5000 },
      { maxIdleConns: 0, idleTimeoutMs: 90_000 },
    ]);
  });

  it.each<[string, StepParams]>([
    ['a negative max_total_tokens', { max_total_tokens: -1 }],
    ['a negative max_total_placeholder_tokens', { max_total_placeholder_tokens: -1 }],
    ['a negative max_idle_conns_per_host', { max_idle_conns_per_host: -1 }],
    ['a fractional limit', { max_total_tokens: 5.5 }],
    ['a string limit', { max_total_tokens: '5' }],
    ['a timeout without unit', { timeout: '30' }],
    ['a numeric timeout', { timeout: 30 }],
    ['a bad idle_conn_timeout', { idle_conn_timeout: 'abc' }],
    ['a non-string address', { address: 8080 }],
  ])('rejects %s at start-up', (_n, params) => {
    expect(() => createRenderStep(params, up.td.deps)).toThrow(ConfigError);
  });

  it('does not validate the address at start-up, and ignores unknown params', () => {
    expect(() =>
      createRenderStep({ address: '', endpoint: 'ignored', use_openai_format: false, kv_connector: 'kv-nixl' }, up.td.deps),
    ).not.toThrow();
  });
});
