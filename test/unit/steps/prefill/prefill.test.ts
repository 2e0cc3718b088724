import { ConfigError } from '../../../../src/config/errors';
import {
  BadRequestError,
  CancelledError,
  TransportError,
  UpstreamError,
  UpstreamInvalidError,
  classify,
} from '../../../../src/pipeline/errors';
import type { StepDeps, StepParams } from '../../../../src/pipeline/step';
import { createPrefillStep } from '../../../../src/steps/prefill';
import { chatBodyWithImages, entry, FakeUpstream, makeCtx, TestDeps } from '../fake-upstream';

const gateway = new FakeUpstream();
let td: TestDeps;

beforeAll(async () => {
  await gateway.start();
  td = new TestDeps(gateway.url, 300);
});
afterAll(async () => {
  await td.close();
  await gateway.stop();
});
beforeEach(() => gateway.reset());

function prefill(params: StepParams = {}) {
  return createPrefillStep({ use_openai_format: true, ...params }, td.deps);
}

const nixlAnswer = {
  kv_transfer_params: {
    do_remote_decode: true,
    remote_engine_id: 'e1',
    remote_block_ids: [[1, 2]],
    remote_host: '10.0.0.9',
    remote_port: 5557,
  },
};
const ecA = { peer_host: '10.0.0.1', peer_port: 5501 };
const ecB = { peer_host: '10.0.0.2', peer_port: 5502 };

describe('prefill: generate format', () => {
  it('sends a fresh generate body with transfer params in sampling_params.extra_args', async () => {
    gateway.respond = () => ({ body: nixlAnswer });
    const ctx = makeCtx({
      path: '/inference/v1/generate',
      requestId: 'rid-7',
      body: {
        model: 'llava',
        token_ids: [1, 2, 3, 4, 5, 6, 7, 8],
        sampling_params: { max_tokens: 50, min_tokens: 5, temperature: 0.3 },
        features: { client: true },
      },
      tokenIds: [1, 2, 3, 4, 5, 6, 7, 8],
      entries: [entry(0, 'hash-a', 1, 2, 'kw-a'), entry(1, 'hash-b', 4, 2, '')],
      ecTransferParams: [{ 'hash-a': ecA }, { 'hash-b': ecB }],
    });
    await prefill({ kv_connector: 'kv-shared-storage', ec_connector: 'ec-nixl' }).execute(ctx);

    const req = gateway.seen[0]!;
    expect(req.path).toBe('/inference/v1/generate');
    expect(req.headers['epp-profile']).toBe('prefill');
    expect(req.json).toEqual({
      request_id: 'rid-7',
      model: 'llava',
      token_ids: [1, 2, 3, 4, 5, 6, 7, 8],
      sampling_params: {
        max_tokens: 1,
        extra_args: {
          kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false },
          ec_transfer_params: { 'hash-a': ecA, 'hash-b': ecB },
        },
      },
      stream: false,
      features: {
        mm_hashes: { image: ['hash-a', 'hash-b'] },
        mm_placeholders: {
          image: [
            { offset: 1, length: 2 },
            { offset: 4, length: 2 },
          ],
        },
        kwargs_data: { image: ['kw-a', null] },
      },
    });
    expect(ctx.kvTransferParams).toEqual(nixlAnswer.kv_transfer_params);
    // The client's body is untouched.
    expect(ctx.body['sampling_params']).toEqual({ max_tokens: 50, min_tokens: 5, temperature: 0.3 });
  });

  it('shapes a chat request as generate when use_openai_format=false', async () => {
    const ctx = makeCtx({ body: chatBodyWithImages(0, { max_tokens: 9, stream: true }), tokenIds: [5, 6] });
    await prefill({ use_openai_format: false }).execute(ctx);
    expect(gateway.seen[0]!.path).toBe('/inference/v1/generate');
    expect(gateway.seen[0]!.json).toEqual({
      request_id: 'req-1',
      model: 'm',
      token_ids: [5, 6],
      sampling_params: { max_tokens: 1, extra_args: { kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false } } },
      stream: false,
    });
  });
});

describe('prefill: completions format', () => {
  it('sends a fresh minimal body with the rendered ids as prompt and top-level kv', async () => {
    const ctx = makeCtx({
      path: '/v1/completions',
      body: { model: 'm', prompt: [7, 8, 9], max_tokens: 40, min_tokens: 3, temperature: 0.5, stream: true },
      tokenIds: [7, 8, 9],
    });
    await prefill().execute(ctx);
    const req = gateway.seen[0]!;
    expect(req.path).toBe('/v1/completions');
    expect(req.json).toEqual({
      request_id: 'req-1',
      model: 'm',
      prompt: [7, 8, 9],
      kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false },
      max_tokens: 1,
      stream: false,
    });
  });

  it('passes the prompt through when nothing was rendered', async () => {
    await prefill().execute(makeCtx({ path: '/v1/completions', body: { model: 'm', prompt: 'Hello' } }));
    expect(gateway.seen[0]!.json.prompt).toBe('Hello');
    expect(gateway.seen[0]!.json).not.toHaveProperty('token_ids');
  });

  it('sends prompt null when the client sent none', async () => {
    await prefill().execute(makeCtx({ path: '/v1/completions', body: { model: 'm' } }));
    expect(gateway.seen[0]!.raw).toContain('"prompt":null');
  });

  it('keeps the completions path even with use_openai_format=false', async () => {
    await prefill({ use_openai_format: false }).execute(makeCtx({ path: '/v1/completions', body: { prompt: 'x' } }));
    expect(gateway.seen[0]!.path).toBe('/v1/completions');
  });
});

describe('prefill: chat format', () => {
  it('sends the capped client body plus tokens (F0), top-level kv and ec', async () => {
    const body = chatBodyWithImages(1, { max_tokens: 30 });
    const ctx = makeCtx({
      body,
      tokenIds: [1, 2, 3, 4, 5],
      entries: [entry(0, 'hash-a', 1, 3)],
      ecTransferParams: [{ 'hash-a': ecA }],
    });
    await prefill({ ec_connector: 'ec-nixl' }).execute(ctx);
    const req = gateway.seen[0]!;
    expect(req.path).toBe('/v1/chat/completions');
    expect(req.json).toEqual({
      model: 'm',
      messages: body['messages'],
      max_tokens: 1,
      stream: false,
      tokens: {
        token_ids: [1, 2, 3, 4, 5],
        features: { mm_hashes: { image: ['hash-a'] }, mm_placeholders: { image: [{ offset: 1, length: 3 }] } },
      },
      kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false },
      ec_transfer_params: { 'hash-a': ecA },
    });
    expect(body['max_tokens']).toBe(30);
    expect(body).not.toHaveProperty('tokens');
  });

  it('forces non-streaming and strips stream_options', async () => {
    await prefill().execute(makeCtx({ body: { model: 'm', stream: true, stream_options: { include_usage: true } } }));
    expect(gateway.seen[0]!.json.stream).toBe(false);
    expect(gateway.seen[0]!.json).not.toHaveProperty('stream_options');
  });

  it('caps max_completion_tokens and strips min_tokens', async () => {
    await prefill().execute(makeCtx({ body: { model: 'm', max_completion_tokens: 100, min_tokens: 3 } }));
    const json = gateway.seen[0]!.json;
    expect(json.max_tokens).toBe(1);
    expect(json.max_completion_tokens).toBe(1);
    expect(json).not.toHaveProperty('min_tokens');
  });

  it('sends tokens.token_ids null without render and omits features without images (Q2)', async () => {
    await prefill().execute(makeCtx());
    expect(gateway.seen[0]!.raw).toContain('"tokens":{"token_ids":null}');
    expect(gateway.seen[0]!.json).not.toHaveProperty('request_id');
  });
});

describe('prefill: headers and answers', () => {
  it('stamps content type, the request id and the prefill profile over the forwarded client headers', async () => {
    await prefill().execute(
      makeCtx({
        requestId: 'good-id',
        headers: {
          'x-request-id': 'client id',
          'epp-profile': 'decode',
          authorization: 'Bearer t',
          'content-type': 'text/plain',
          connection: 'close',
          'x-custom': 'v',
        },
      }),
    );
    const h = gateway.seen[0]!.headers;
    expect(h['x-request-id']).toBe('good-id');
    expect(h['epp-profile']).toBe('prefill');
    expect(h['content-type']).toBe('application/json');
    expect(h['authorization']).toBe('Bearer t');
    expect(h['x-custom']).toBe('v');
  });

  it.each([400, 404, 429, 503])('turns HTTP %d into UpstreamError(prefill)', async (status) => {
    gateway.respond = () => ({ status, body: 'overloaded' });
    const err = await prefill()
      .execute(makeCtx())
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamError);
    expect(err).toMatchObject({ step: 'prefill', status, body: 'overloaded' });
  });

  it('accepts only 200: a 204 is an UpstreamError (Q15)', async () => {
    gateway.respond = () => ({ status: 204 });
    await expect(prefill().execute(makeCtx())).rejects.toMatchObject({ step: 'prefill', status: 204 });
  });

  it.each(['not json', '[1,2]', '"str"', ''])(
    'fails with an unusable-answer error (502, upstream_invalid) on the answer %j',
    async (answer) => {
      gateway.respond = () => ({ body: answer });
      const err = await prefill()
        .execute(makeCtx())
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UpstreamInvalidError);
      expect(classify(err, 'r')).toMatchObject({ status: 502, errorClass: 'upstream_invalid', message: 'internal error (request_id: r)' });
      expect(err).not.toBeInstanceOf(UpstreamError);
      expect(err).not.toBeInstanceOf(BadRequestError);
      expect((err as Error).message).toMatch(/^prefill: decode response/);
    },
  );

  it('reads only the first JSON value of the answer', async () => {
    gateway.respond = () => ({ body: '{"kv_transfer_params":{"a":1}}\n{"x":2}' });
    const ctx = makeCtx();
    await prefill().execute(ctx);
    expect(ctx.kvTransferParams).toEqual({ a: 1 });
  });

  it.each<[string, string, Record<string, unknown> | null]>([
    ['a string', '{"kv_transfer_params":"x"}', null],
    ['an array', '{"kv_transfer_params":[1]}', null],
    ['null', '{"kv_transfer_params":null}', null],
    ['absent', '{"choices":[]}', null],
    ['an empty object', '{"kv_transfer_params":{}}', {}],
    ['a null answer', 'null', null],
  ])('coerces kv_transfer_params that is %s', async (_n, answer, want) => {
    gateway.respond = () => ({ body: answer });
    const ctx = makeCtx();
    await prefill().execute(ctx);
    expect(ctx.kvTransferParams).toEqual(want);
  });

  it('uses gateway.timeout as the response-header timeout', async () => {
    gateway.respond = () => new Promise((resolve) => setTimeout(() => resolve({ body: {} }), 3000));
    const err = await prefill()
      .execute(makeCtx())
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransportError);
    expect((err as TransportError).timedOut).toBe(true);
  });

  it('is cancelled when the client goes away', async () => {
    const ac = new AbortController();
    gateway.respond = () => {
      ac.abort();
      return new Promise((resolve) => setTimeout(() => resolve({ body: {} }), 3000));
    };
    await expect(prefill().execute(makeCtx({ signal: ac.signal }))).rejects.toBeInstanceOf(CancelledError);
  });
});

describe('prefill: connectors', () => {
  it('kv-nixl sends six fields, four of them explicit nulls', async () => {
    await prefill({ kv_connector: 'kv-nixl' }).execute(makeCtx());
    expect(gateway.seen[0]!.json.kv_transfer_params).toEqual({
      do_remote_decode: true,
      do_remote_prefill: false,
      remote_engine_id: null,
      remote_block_ids: null,
      remote_host: null,
      remote_port: null,
    });
  });

  it('kv-shared-storage (also the "" default) sends two flags only', async () => {
    for (const kv_connector of ['kv-shared-storage', '']) {
      gateway.reset();
      await prefill({ kv_connector }).execute(makeCtx());
      expect(gateway.seen[0]!.json.kv_transfer_params).toEqual({ do_remote_decode: true, do_remote_prefill: false });
    }
  });

  it('kv-sglang sends a bootstrap port and room', async () => {
    await prefill({ kv_connector: 'kv-sglang' }).execute(makeCtx());
    expect(gateway.seen[0]!.json.kv_transfer_params).toMatchObject({ do_remote_decode: true, bootstrap_room: expect.any(String) });
  });

  it.each([
    ['/v1/chat/completions', { model: 'm' }],
    ['/v1/completions', { prompt: 'x' }],
    ['/inference/v1/generate', { token_ids: [1] }],
  ])('ec-shared-storage never sends ec_transfer_params (%s)', async (path, body) => {
    const ctx = makeCtx({ path, body, tokenIds: [1], entries: [entry(0, 'h', 0, 1)], ecTransferParams: [{ h: ecA }] });
    await prefill({ ec_connector: 'ec-shared-storage' }).execute(ctx);
    expect(gateway.seen[0]!.raw).not.toContain('ec_transfer_params');
  });

  it('ec-nixl conflicting descriptors fail before the gateway is called', async () => {
    const ctx = makeCtx({ ecTransferParams: [{ h: ecA }, { h: ecB }] });
    const err = await prefill({ ec_connector: 'ec-nixl' })
      .execute(ctx)
      .catch((e: unknown) => e);
    expect((err as Error).message).toContain('conflicting descriptors for mm_hash "h"');
    expect(err).not.toBeInstanceOf(BadRequestError);
    expect(gateway.seen).toHaveLength(0);
  });

  it('ec-nixl without encode results sends no ec field', async () => {
    await prefill({ ec_connector: 'ec-nixl' }).execute(makeCtx());
    expect(gateway.seen[0]!.raw).not.toContain('ec_transfer_params');
  });
});

describe('prefill: params', () => {
  it('rejects unknown connectors with the upstream text', () => {
    expect(() => prefill({ kv_connector: 'kv-bogus' })).toThrow('prefill: unknown kv_connector: "kv-bogus"');
    expect(() => prefill({ ec_connector: 'ec-bogus' })).toThrow('prefill: unknown ec_connector: "ec-bogus"');
  });

  it.each<[string, StepParams]>([
    ['a non-bool use_openai_format', { use_openai_format: 'true' }],
    ['a numeric use_openai_format', { use_openai_format: 1 }],
    ['a non-string kv_connector', { kv_connector: 1 }],
  ])('rejects %s', (_n, params) => {
    expect(() => createPrefillStep(params, td.deps)).toThrow(ConfigError);
  });

  it('defaults use_openai_format to true when absent', async () => {
    await createPrefillStep({}, td.deps).execute(makeCtx());
    expect(gateway.seen[0]!.path).toBe('/v1/chat/completions');
  });

  it('refuses to build without a gateway client, naming gateway.address', () => {
    const deps: StepDeps = { ...td.deps, gateway: undefined };
    expect(() => createPrefillStep({}, deps)).toThrow(ConfigError);
    expect(() => createPrefillStep({}, deps)).toThrow(/^gateway\.address: expected an http:\/\/ or https:\/\/ URL \(the "prefill" step/);
  });
});
