import { parseConfig } from '../../../src/config/config';
import { ConfigError } from '../../../src/config/errors';
import type { ForwardDecision, RespondDecision } from '../../../src/pipeline/decision';
import { BadRequestError } from '../../../src/pipeline/errors';
import { PipelineHandler } from '../../../src/pipeline/handler';
import { parseJsonBody, PLAIN_BODY_CODEC, type JsonObject } from '../../../src/pipeline/json-body';
import { checkRequestLimits, DEFAULT_REQUEST_LIMITS, requestLimits, type LimitName } from '../../../src/pipeline/request-limits';
import { checkInferenceRequest } from '../../../src/pipeline/request-shape';
import { silentLogger } from '../../../src/observability/logger';

const L = DEFAULT_REQUEST_LIMITS;
const check =
  (body: JsonObject, kind: 'boolean' | 'count' | 'either' = 'either') =>
  () =>
    checkRequestLimits(body, L, PLAIN_BODY_CODEC, kind);

describe('request limits: the documented defaults', () => {
  it('n and best_of at most 128, logprobs at most 20 (vLLM --max-logprobs), every limit a safe integer', () => {
    expect(L).toMatchObject({ n: 128, best_of: 128, logprobs: 20, top_logprobs: 20, prompt_logprobs: 20 });
    for (const v of Object.values(L)) expect(Number.isSafeInteger(v)).toBe(true);
    expect(Object.keys(L).sort()).toEqual(
      [
        'best_of',
        'logit_bias_entries',
        'logprobs',
        'max_completion_tokens',
        'max_output_tokens',
        'max_tokens',
        'min_tokens',
        'n',
        'prompt_logprobs',
        'stop_count',
        'stop_length',
        'top_logprobs',
      ].sort(),
    );
  });
});

describe('request limits: integer fields', () => {
  const FIELDS: Array<[LimitName, number]> = [
    ['n', 1],
    ['best_of', 1],
    ['max_tokens', 0],
    ['max_completion_tokens', 0],
    ['max_output_tokens', 0],
    ['min_tokens', 0],
    ['top_logprobs', 0],
    ['prompt_logprobs', 0],
    ['logprobs', 0],
  ];
  const kind = (f: LimitName) => (f === 'logprobs' ? 'count' : 'either');

  describe.each(FIELDS)('%s', (field, min) => {
    const max = L[field];
    it(`${min} and the limit pass; null counts as absent`, () => {
      for (const v of [min, max, null]) expect(check({ [field]: v }, kind(field))).not.toThrow();
    });
    it.each([
      ['above the limit', max + 1],
      ['below the minimum', min - 1],
      ['a float', 0.5],
      ['a negative', -1],
      ['2^53', 2 ** 53],
      ['2^53 + 2', 2 ** 53 + 2],
      ['1e308', 1e308],
      ['a numeric string', '1'],
      ['a boolean', true],
      ['an array', [1]],
      ['an object', { n: 1 }],
    ])('%s is a 400 naming the field and the limit', (_what, v) => {
      expect(check({ [field]: v }, kind(field))).toThrow(BadRequestError);
      expect(check({ [field]: v }, kind(field))).toThrow(`${field} must be an integer from ${min} to ${max}, got `);
    });
  });

  it('the number is shown as it parsed; a string is never echoed', () => {
    expect(check({ n: 2 ** 53 })).toThrow('n must be an integer from 1 to 128, got 9007199254740992');
    expect(check({ n: '9007199254740992' })).toThrow(/got a string$/);
  });

  it('configured limits replace the defaults', () => {
    const limits = requestLimits({ n: 4 });
    expect(() => checkRequestLimits({ n: 4 }, limits, PLAIN_BODY_CODEC, 'either')).not.toThrow();
    expect(() => checkRequestLimits({ n: 5 }, limits, PLAIN_BODY_CODEC, 'either')).toThrow('n must be an integer from 1 to 4, got 5');
    expect(limits.best_of).toBe(128);
  });
});

describe('request limits: logprobs by API', () => {
  it('chat: a boolean (top_logprobs is the count)', () => {
    expect(check({ logprobs: true, top_logprobs: 20 }, 'boolean')).not.toThrow();
    expect(check({ logprobs: 5 }, 'boolean')).toThrow('logprobs must be a boolean, got 5');
  });
  it('completions: a count; a boolean is not one', () => {
    expect(check({ logprobs: 20 }, 'count')).not.toThrow();
    expect(check({ logprobs: true }, 'count')).toThrow('logprobs must be an integer from 0 to 20, got a boolean');
    expect(check({ logprobs: 21 }, 'count')).toThrow('logprobs must be an integer from 0 to 20, got 21');
  });
  it('elsewhere: either, the count bounded', () => {
    expect(check({ logprobs: false })).not.toThrow();
    expect(check({ logprobs: 20 })).not.toThrow();
    expect(check({ logprobs: 2 ** 53 })).toThrow('logprobs must be an integer from 0 to 20');
  });
});

describe('request limits: stop and logit_bias', () => {
  const strings = (n: number, len = 1) => Array.from({ length: n }, (_, i) => String(i % 10).repeat(len));

  it('stop: a string or up to stop_count strings of up to stop_length characters', () => {
    expect(check({ stop: 'x'.repeat(L.stop_length) })).not.toThrow();
    expect(check({ stop: strings(L.stop_count, L.stop_length) })).not.toThrow();
    expect(check({ stop: [] })).not.toThrow();
    expect(check({ stop: 'x'.repeat(L.stop_length + 1) })).toThrow(`stop must be at most ${L.stop_length} characters long`);
    expect(check({ stop: strings(L.stop_count + 1) })).toThrow(`stop must hold at most ${L.stop_count} strings, got ${L.stop_count + 1}`);
    expect(check({ stop: ['a', 'x'.repeat(L.stop_length + 1)] })).toThrow(`stop[1] must be at most ${L.stop_length} characters long`);
    expect(check({ stop: ['a', 7] })).toThrow('stop[1] must be a string, got 7');
    expect(check({ stop: 7 })).toThrow('stop must be a string or an array of strings, got 7');
    expect(check({ stop: { a: 1 } })).toThrow('stop must be a string or an array of strings, got an object');
  });

  it('a huge stop array is refused by its count', () => {
    expect(check({ stop: new Array(1_000_000).fill('a') })).toThrow('stop must hold at most');
  });

  it('stop_sequences (Anthropic Messages) is bounded the same way', () => {
    expect(check({ stop_sequences: strings(L.stop_count) })).not.toThrow();
    expect(check({ stop_sequences: strings(L.stop_count + 1) })).toThrow('stop_sequences must hold at most');
  });

  it('a stop string kept raw by the parser (a placeholder) is measured by its real length', () => {
    const long = 'y'.repeat(40 * 1024);
    const parsed = parseJsonBody(Buffer.from(JSON.stringify({ stop: [long] })));
    expect((parsed.body['stop'] as string[])[0]!.length).toBeLessThan(100);
    expect(() => checkRequestLimits(parsed.body, L, parsed.codec, 'either')).toThrow('stop[0] must be at most 1024 characters long');
    const within = requestLimits({ stop_length: 40 * 1024 });
    expect(() => checkRequestLimits(parsed.body, within, parsed.codec, 'either')).not.toThrow();
  });

  it('logit_bias: an object of at most logit_bias_entries entries', () => {
    const bias = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [String(i), 1]));
    expect(check({ logit_bias: bias(L.logit_bias_entries) })).not.toThrow();
    expect(check({ logit_bias: bias(L.logit_bias_entries + 1) })).toThrow(`logit_bias must have at most ${L.logit_bias_entries} entries`);
    expect(check({ logit_bias: [1, 2] })).toThrow('logit_bias must be an object mapping token ids to biases, got an array');
    expect(check({ logit_bias: '{}' })).toThrow('got a string');
  });
});

describe('request limits: where they apply', () => {
  const inference = (path: string, body: JsonObject) => () => checkInferenceRequest(path, body, PLAIN_BODY_CODEC, L);
  const messages = [{ role: 'user', content: 'hi' }];

  it('every inference API checks its top level', () => {
    expect(inference('/v1/chat/completions', { messages, n: 129 })).toThrow('n must be');
    expect(inference('/v1/completions', { prompt: 'x', best_of: 2 ** 53 })).toThrow('best_of must be');
    expect(inference('/v1/responses', { input: 'x', max_output_tokens: -1 })).toThrow('max_output_tokens must be');
    expect(inference('/inference/v1/generate', { token_ids: [1], max_tokens: 0.5 })).toThrow('max_tokens must be');
  });

  it('generate: also the fields in sampling_params, named with their place', () => {
    expect(inference('/inference/v1/generate', { token_ids: [1], sampling_params: { n: 128, logprobs: 20 } })).not.toThrow();
    expect(inference('/inference/v1/generate', { token_ids: [1], sampling_params: { n: 2 ** 53 } })).toThrow(
      'sampling_params.n must be an integer from 1 to 128, got 9007199254740992',
    );
    expect(inference('/inference/v1/generate', { token_ids: [1], sampling_params: { stop: ['a', 1] } })).toThrow(
      'sampling_params.stop[1] must be a string',
    );
  });
});

describe('request limits through the handler', () => {
  let forwarded = 0;
  const handler = new PipelineHandler({
    steps: [{ type: 'decode', execute: async () => void forwarded++ }],
    maxBodyBytes: 1 << 20,
    log: silentLogger(),
    requestLimits: requestLimits({ max_tokens: 100 }),
  });
  const send = async (path: string, body: unknown) =>
    handler.begin({ method: 'POST', path, headers: { 'x-request-id': 'lim-1' } })!.complete(Buffer.from(JSON.stringify(body)));
  const message = (d: unknown) => JSON.parse(((d as RespondDecision).body as Buffer).toString()).error.message as string;

  it('a value past a limit is a 400 in the OpenAI shape before the first step runs', async () => {
    forwarded = 0;
    const d = await send('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 101 });
    expect(d).toMatchObject({ kind: 'respond', status: 400 });
    expect(message(d)).toBe('max_tokens must be an integer from 0 to 100, got 101 (request_id: lim-1)');
    expect(forwarded).toBe(0);
  });

  it('/v1/messages (passthrough) gets the same limits; a body within them goes on as it came', async () => {
    const over = await send('/v1/messages', { model: 'm', max_tokens: 2 ** 53, messages: [] });
    expect(over).toMatchObject({ kind: 'respond', status: 400 });
    expect(message(over)).toBe('max_tokens must be an integer from 0 to 100, got 9007199254740992 (request_id: lim-1)');
    const stops = await send('/v1/messages', { model: 'm', max_tokens: 1, stop_sequences: new Array(65).fill('x') });
    expect(message(stops)).toMatch(/^stop_sequences must hold at most 64 strings/);
    const ok = (await send('/v1/messages', { model: 'm', max_tokens: 100, messages: [] })) as ForwardDecision;
    expect(ok).toMatchObject({ kind: 'forward', body: null, setHeaders: { 'epp-profile': 'decode' } });
    expect(ok.metadata['path_taken']).toBe('passthrough');
  });

  it('a /v1/messages body that is not a JSON object is a 400, as on the inference paths', async () => {
    const d = await handler
      .begin({ method: 'POST', path: '/v1/messages', headers: { 'x-request-id': 'lim-2' } })!
      .complete(Buffer.from('{"max_tokens":'));
    expect(d).toMatchObject({ kind: 'respond', status: 400 });
    expect(message(d)).toBe('invalid JSON body (request_id: lim-2)');
  });

  it('other passthrough APIs are not parsed: an n there is not ours to judge', async () => {
    const d = await send('/v1/embeddings', { input: 'x', n: 2 ** 53 });
    expect(d.kind).toBe('forward');
  });
});

describe('pipeline.request_limits in the config', () => {
  it('defaults, a file value and an environment override', () => {
    expect(parseConfig({}, {}).pipeline.requestLimits).toEqual(DEFAULT_REQUEST_LIMITS);
    const c = parseConfig(
      { pipeline: { request_limits: { n: 8, stop_count: 4 } } },
      { COORDINATOR_PIPELINE_REQUEST_LIMITS_MAX_TOKENS: '4096' },
    );
    expect(c.pipeline.requestLimits).toMatchObject({ n: 8, stop_count: 4, max_tokens: 4096, best_of: 128 });
    expect(c.warnings).toEqual([]);
  });

  it.each([
    [{ n: 0 }, 'pipeline.request_limits.n'],
    [{ n: 1.5 }, 'pipeline.request_limits.n'],
    [{ max_tokens: 2 ** 60 }, 'pipeline.request_limits.max_tokens'],
    [{ logprobs: -1 }, 'pipeline.request_limits.logprobs'],
  ])('%j stops start-up naming the key', (limits, key) => {
    expect(() => parseConfig({ pipeline: { request_limits: limits } }, {})).toThrow(ConfigError);
    expect(() => parseConfig({ pipeline: { request_limits: limits } }, {})).toThrow(key);
  });

  it('an unknown limit is a warning; a request_limits that is not a map stops start-up', () => {
    expect(parseConfig({ pipeline: { request_limits: { temperature: 2 } } }, {}).warnings).toEqual([
      'unknown key "pipeline.request_limits.temperature" ignored',
    ]);
    expect(() => parseConfig({ pipeline: { request_limits: 5 } }, {})).toThrow('pipeline.request_limits');
  });
});
