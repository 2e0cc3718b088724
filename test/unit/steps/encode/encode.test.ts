/** encode against a local gateway fake (reference §3.4, §9.11). */
import { ConfigError } from '../../../../src/config/errors';
import { classify, UpstreamError } from '../../../../src/pipeline/errors';
import type { StepDeps, StepParams } from '../../../../src/pipeline/step';
import { createEncodeStep, encodeTokenIds } from '../../../../src/steps/encode';
import { chatBodyWithImages, entry, FakeUpstream, makeCtx, TestDeps } from '../fake-upstream';
import type { SeenRequest } from '../fake-upstream';

const gateway = new FakeUpstream();
let td: TestDeps;

beforeAll(async () => {
  await gateway.start();
  td = new TestDeps(gateway.url, 5000);
});
afterAll(async () => {
  await td.close();
  await gateway.stop();
});
beforeEach(() => gateway.reset());

function encode(params: StepParams = {}, deps: StepDeps = td.deps) {
  return createEncodeStep({ use_openai_format: true, ...params }, deps);
}

/** Holds answers until `n` requests are in flight together (or a fallback delay), recording the peak. */
function barrier(n: number, answer: (req: SeenRequest) => unknown, fallbackMs = 1000) {
  const state = { inFlight: 0, max: 0 };
  const waiting: Array<() => void> = [];
  let fallback: NodeJS.Timeout | undefined;
  const release = (): void => {
    for (const w of waiting.splice(0)) w();
  };
  gateway.respond = (req) =>
    new Promise((resolve) => {
      state.inFlight++;
      state.max = Math.max(state.max, state.inFlight);
      waiting.push(() => {
        state.inFlight--;
        resolve({ body: answer(req) });
      });
      clearTimeout(fallback);
      if (waiting.length >= n) release();
      else fallback = setTimeout(release, fallbackMs);
    });
  return state;
}

const hashOf = (req: SeenRequest): string => (req.json.features ?? req.json.tokens.features).mm_hashes.image[0];
const three = () => [entry(0, 'a', 1, 3, 'kw-a'), entry(1, 'b', 5, 3, 'kw-b'), entry(2, 'c', 9, 3, 'kw-c')];
const tokens12 = [1, 32000, 32000, 32000, 7, 32001, 32001, 32001, 8, 32002, 32002, 32002];

describe('encode: fan-out', () => {
  it('sends one encode call per image, concurrently, and merges the EC params in entry order (generate format)', async () => {
    const peak = barrier(3, (req) => ({ ec_transfer_params: { [hashOf(req)]: { peer_host: `enc-${hashOf(req)}`, peer_port: 5501 } } }));
    const ctx = makeCtx({ body: chatBodyWithImages(3, { model: 'llava' }), tokenIds: tokens12, entries: three(), requestId: 'rid-3' });
    ctx.ecTransferParams = null;
    await encode({ use_openai_format: false, ec_connector: 'ec-nixl', max_parallel: 4 }).execute(ctx);

    expect(peak.max).toBe(3);
    expect(gateway.seen).toHaveLength(3);
    for (const req of gateway.seen) {
      expect(req.path).toBe('/inference/v1/generate');
      expect(req.headers['epp-profile']).toBe('encode');
      expect(req.headers['x-request-id']).toBe('rid-3');
      expect(req.headers['content-type']).toBe('application/json');
      expect(req.json.model).toBe('llava');
    }
    const byHash = Object.fromEntries(gateway.seen.map((r) => [hashOf(r), r.json]));
    expect(byHash['b']).toEqual({
      model: 'llava',
      token_ids: [1, 32001, 32001, 32001],
      features: {
        mm_hashes: { image: ['b'] },
        mm_placeholders: { image: [{ offset: 1, length: 3 }] },
        kwargs_data: { image: ['kw-b'] },
      },
      sampling_params: { max_tokens: 1 },
      stream: false,
    });
    // Merged in entry order, whatever order the answers came in.
    expect(ctx.ecTransferParams).toEqual([
      { a: { peer_host: 'enc-a', peer_port: 5501 } },
      { b: { peer_host: 'enc-b', peer_port: 5501 } },
      { c: { peer_host: 'enc-c', peer_port: 5501 } },
    ]);
  });

  it('never has more than max_parallel calls in flight', async () => {
    const peak = barrier(2, () => ({}));
    const entries = [0, 1, 2, 3].map((i) => entry(i, `h${i}`, 1, 1));
    const ctx = makeCtx({ body: chatBodyWithImages(4), tokenIds: [1, 5, 6], entries });
    await encode({ max_parallel: 2 }).execute(ctx);
    expect(gateway.seen).toHaveLength(4);
    expect(peak.max).toBe(2);
  });

  it('max_parallel 1 runs the calls one at a time, in entry order', async () => {
    // Each answer is held a while, so a second call would have time to arrive if one were sent.
    const peak = barrier(2, () => ({}), 200);
    const ctx = makeCtx({ body: chatBodyWithImages(3), tokenIds: tokens12, entries: three() });
    await encode({ max_parallel: 1 }).execute(ctx);
    expect(peak.max).toBe(1);
    expect(gateway.seen.map(hashOf)).toEqual(['a', 'b', 'c']);
  }, 10_000);

  it('skips non-object ec_transfer_params (string, array, null, {}) without failing', async () => {
    const answers: unknown[] = [
      { ec_transfer_params: 'x' },
      { ec_transfer_params: [1] },
      { ec_transfer_params: null },
      { ec_transfer_params: {} },
      null,
    ];
    let i = 0;
    gateway.respond = () => ({ body: answers[i++] === null ? 'null' : answers[i - 1] });
    const entries = answers.map((_a, k) => entry(k, `h${k}`, 1, 1));
    const ctx = makeCtx({ body: chatBodyWithImages(answers.length), tokenIds: [1, 2], entries });
    ctx.ecTransferParams = null;
    await encode({ ec_connector: 'ec-nixl', max_parallel: 1 }).execute(ctx);
    expect(gateway.seen).toHaveLength(5);
    expect(ctx.ecTransferParams).toBeNull();
  });

  it('an encoder returning no EC params is fine (ec-nixl records nothing)', async () => {
    gateway.respond = () => ({ body: { choices: [] } });
    const ctx = makeCtx({ body: chatBodyWithImages(2), tokenIds: [1, 2, 3], entries: [entry(0, 'a', 1, 1), entry(1, 'b', 2, 1)] });
    ctx.ecTransferParams = null;
    await encode({ ec_connector: 'ec-nixl' }).execute(ctx);
    expect(gateway.seen).toHaveLength(2);
    expect(ctx.ecTransferParams).toBeNull();
  });

  it('ec-shared-storage records nothing even when encoders answer with params', async () => {
    gateway.respond = () => ({ body: { ec_transfer_params: { a: { x: 1 } } } });
    const ctx = makeCtx({ body: chatBodyWithImages(1), tokenIds: [1, 2], entries: [entry(0, 'a', 1, 1)] });
    ctx.ecTransferParams = null;
    await encode({ ec_connector: 'ec-shared-storage' }).execute(ctx);
    expect(ctx.ecTransferParams).toBeNull();
  });
});

describe('encode: skipping', () => {
  it('makes no call for a text-only request', async () => {
    const ctx = makeCtx({ body: chatBodyWithImages(0), tokenIds: [1, 2, 3] });
    ctx.ecTransferParams = null;
    await encode({ ec_connector: 'ec-nixl' }).execute(ctx);
    expect(gateway.seen).toEqual([]);
    expect(ctx.ecTransferParams).toBeNull();
  });

  it('makes no call for /inference/v1/generate, even with entries', async () => {
    const ctx = makeCtx({
      path: '/inference/v1/generate',
      body: { model: 'm', token_ids: [1, 5, 5] },
      tokenIds: [1, 5, 5],
      entries: [entry(0, 'a', 1, 2)],
    });
    ctx.ecTransferParams = null;
    await encode({ ec_connector: 'ec-nixl', use_openai_format: false }).execute(ctx);
    expect(gateway.seen).toEqual([]);
    expect(ctx.ecTransferParams).toBeNull();
  });
});

describe('encode: chat format', () => {
  it('sends only the image part with tokens and F0 features; no text, no client sampling, no uuid', async () => {
    gateway.respond = () => ({ body: {} });
    const body = {
      model: 'llava',
      temperature: 0.2,
      max_completion_tokens: 50,
      min_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAA', detail: 'high' }, uuid: 'client-uuid' },
          ],
        },
      ],
    };
    const ctx = makeCtx({ body, tokenIds: [1, 9, 32000, 32000, 32000, 32000, 2], entries: [entry(0, 'hash-a', 2, 4, 'kw')] });
    await encode().execute(ctx);
    const req = gateway.seen[0]!;
    expect(req.path).toBe('/v1/chat/completions');
    expect(req.json).toEqual({
      model: 'llava',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAA', detail: 'high' } }] }],
      tokens: {
        token_ids: [1, 32000, 32000, 32000, 32000],
        features: { mm_hashes: { image: ['hash-a'] }, mm_placeholders: { image: [{ offset: 1, length: 4 }] } },
      },
      max_tokens: 1,
      stream: false,
    });
    // The client body is untouched.
    expect(ctx.body).toEqual(body);
  });

  it('picks each entry’s image by index across messages; an index past the images sends an empty URL', async () => {
    gateway.respond = () => ({ body: {} });
    const body = {
      model: 'm',
      messages: [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,ONE' } }] },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'x' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,TWO' } },
          ],
        },
      ],
    };
    const ctx = makeCtx({ body, tokenIds: [1, 2, 3], entries: [entry(0, 'a', 1, 1), entry(1, 'b', 2, 1), entry(2, 'c', 2, 1)] });
    await encode({ max_parallel: 1 }).execute(ctx);
    expect(gateway.seen.map((r) => r.json.messages[0].content[0].image_url.url)).toEqual([
      'data:image/png;base64,ONE',
      'data:image/png;base64,TWO',
      '',
    ]);
  });
});

describe('encode: token ids', () => {
  it('builds [BOS, P x length] from the rendered ids', () => {
    expect(encodeTokenIds([1, 32000, 32000, 32000, 5], entry(0, 'h', 1, 3))).toEqual([1, 32000, 32000, 32000]);
    expect(encodeTokenIds([7, 8, 9], entry(0, 'h', 2, 2))).toEqual([7, 9, 9]);
  });

  it('falls back to BOS 1 and placeholder 0 without ids, or with an offset past them', () => {
    expect(encodeTokenIds(null, entry(0, 'h', 1, 2))).toEqual([1, 0, 0]);
    expect(encodeTokenIds([], entry(0, 'h', 0, 1))).toEqual([1, 0]);
    expect(encodeTokenIds([5, 6], entry(0, 'h', 9, 2))).toEqual([5, 0, 0]);
  });

  it('sends kwargs_data null for an encoder-cache hit in the tokens-in format', async () => {
    gateway.respond = () => ({ body: {} });
    const ctx = makeCtx({
      body: chatBodyWithImages(2),
      tokenIds: [1, 4, 4, 5, 5],
      entries: [entry(0, 'a', 1, 2, 'kw-a'), entry(1, 'b', 3, 2, '')],
    });
    await encode({ use_openai_format: false, max_parallel: 1 }).execute(ctx);
    expect(gateway.seen.map((r) => r.json.features.kwargs_data)).toEqual([{ image: ['kw-a'] }, { image: [null] }]);
    expect(gateway.seen.map((r) => r.json.token_ids)).toEqual([
      [1, 4, 4],
      [1, 5, 5],
    ]);
  });
});

describe('encode: failures', () => {
  it('an encoder 5xx fails the step as encode[i] (502 to the client), and nothing is merged', async () => {
    gateway.respond = (req) =>
      hashOf(req) === 'b' ? { status: 500, body: 'secret upstream detail' } : { body: { ec_transfer_params: { [hashOf(req)]: { p: 1 } } } };
    const ctx = makeCtx({ body: chatBodyWithImages(3), tokenIds: tokens12, entries: three() });
    ctx.ecTransferParams = null;
    const err = await encode({ ec_connector: 'ec-nixl' })
      .execute(ctx)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamError);
    expect(err).toMatchObject({ step: 'encode[1]', status: 500 });
    const c = classify(err, 'rid');
    expect(c.status).toBe(502);
    expect(c.message).not.toContain('secret');
    expect(ctx.ecTransferParams).toBeNull();
  });

  it('an encoder 4xx is forwarded with the encode[i] step name', async () => {
    gateway.respond = () => ({ status: 422, body: 'bad image' });
    const ctx = makeCtx({ body: chatBodyWithImages(1), tokenIds: [1, 2], entries: [entry(0, 'a', 1, 1)] });
    const err = await encode()
      .execute(ctx)
      .catch((e: unknown) => e);
    const c = classify(err, 'rid');
    expect(c.status).toBe(422);
    expect(c.message).toBe('encode[0] rejected the request: HTTP 422 (request_id: rid)');
  });

  it.each([
    ['a non-200 2xx', { status: 201, body: {} }],
    ['a body that is not JSON', { body: 'not json' }],
    ['a JSON array', { body: [1, 2] }],
  ])('%s is a 502', async (_name, reply) => {
    gateway.respond = () => reply;
    const ctx = makeCtx({ body: chatBodyWithImages(1), tokenIds: [1, 2], entries: [entry(0, 'a', 1, 1)] });
    const err = await encode()
      .execute(ctx)
      .catch((e: unknown) => e);
    expect(classify(err, 'rid').status).toBe(502);
  });

  it('the first failure cancels the calls still in flight', async () => {
    // The gateway timeout is far longer than this test's own: only cancellation lets it finish.
    const slow = new TestDeps(gateway.url, 60_000);
    gateway.respond = (req) => {
      if (hashOf(req) === 'a') return { status: 503, body: 'down' };
      // Never answers; resolved only by the connection closing (the step cancelling it).
      return new Promise(() => undefined);
    };
    const ctx = makeCtx({ body: chatBodyWithImages(3), tokenIds: tokens12, entries: three() });
    try {
      const err = await encode({}, slow.deps)
        .execute(ctx)
        .catch((e: unknown) => e);
      expect(err).toMatchObject({ step: 'encode[0]', status: 503 });
    } finally {
      await slow.close();
    }
  }, 10_000);
});

describe('encode: params', () => {
  it.each([
    [{ max_parallel: 0 }],
    [{ max_parallel: -1 }],
    [{ max_parallel: 2.5 }],
    [{ max_parallel: '4' }],
    [{ use_openai_format: 'false' }],
  ])('%j is refused at start-up', (params) => {
    expect(() => encode(params)).toThrow(ConfigError);
  });

  it('accepts max_parallel 4.0 (an integral float, as YAML and JSON give it)', () => {
    expect(() => encode({ max_parallel: 4.0 })).not.toThrow();
  });

  it('refuses an unknown ec_connector with upstream’s message', () => {
    expect(() => encode({ ec_connector: 'ec-magic' })).toThrow('encode: unknown ec_connector: "ec-magic"');
  });

  it('refuses to build without a gateway client, naming gateway.address', () => {
    const deps: StepDeps = { ...td.deps, gateway: undefined };
    expect(() => encode({}, deps)).toThrow(ConfigError);
    expect(() => encode({}, deps)).toThrow(/^gateway\.address: expected an http:\/\/ or https:\/\/ URL \(the "encode" step/);
  });
});
