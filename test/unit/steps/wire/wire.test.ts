import { BadRequestError } from '../../../../src/pipeline/errors';
import { silentLogger } from '../../../../src/observability/logger';
import {
  buildMmFeatures,
  capSingleTokenOutput,
  coerceParamsMap,
  decodeChatRenderResponse,
  decodeCompletionsRenderResponse,
  decodeFirstJsonValue,
  detectFormat,
  extractMultimodalEntries,
  extractTokenIds,
  pathForFormat,
  resolveFormat,
  setGenerateTransferParams,
  toTokenIds,
  validatePlaceholderBounds,
  validateSamplingParams,
} from '../../../../src/steps/wire';
import type { JsonObject, MultimodalEntry } from '../../../../src/pipeline/context';

describe('resolveFormat and paths (§2.5)', () => {
  it.each([
    [true, '/v1/chat/completions', 'chat'],
    [false, '/v1/chat/completions', 'generate'],
    [true, '/v1/completions', 'completions'],
    [false, '/v1/completions', 'completions'],
    [true, '/inference/v1/generate', 'generate'],
    [false, '/inference/v1/generate', 'generate'],
    [true, '/tenant-a/v1/chat/completions', 'chat'],
    [true, '/something/else', 'generate'],
  ] as const)('use_openai_format=%s, %s -> %s', (flag, path, want) => {
    expect(resolveFormat(flag, path)).toBe(want);
  });

  it('detects by substring and maps formats to paths', () => {
    expect(detectFormat('/v1/chat/completions')).toBe('chat');
    expect(detectFormat('/x/v1/completions')).toBe('completions');
    expect(pathForFormat('chat')).toBe('/v1/chat/completions');
    expect(pathForFormat('completions')).toBe('/v1/completions');
    expect(pathForFormat('generate')).toBe('/inference/v1/generate');
  });
});

describe('capSingleTokenOutput (§2.6)', () => {
  it('chat: caps max_tokens, strips min_tokens, caps an existing max_completion_tokens, forces non-streaming', () => {
    const body: JsonObject = {
      max_tokens: 50,
      min_tokens: 3,
      max_completion_tokens: 40,
      stream: true,
      stream_options: { include_usage: true },
      max_output_tokens: 9,
    };
    capSingleTokenOutput(body, 'chat');
    expect(body).toEqual({ max_tokens: 1, max_completion_tokens: 1, stream: false, max_output_tokens: 9 });
  });

  it('never adds max_completion_tokens', () => {
    const body: JsonObject = { model: 'm' };
    capSingleTokenOutput(body, 'chat');
    expect(body).toEqual({ model: 'm', max_tokens: 1, stream: false });
  });

  it('completions: caps and strips at the top level', () => {
    const body: JsonObject = { prompt: 'x', max_tokens: 9, min_tokens: 2 };
    expect(capSingleTokenOutput(body, 'completions')).toBe(body);
    expect(body).toEqual({ prompt: 'x', max_tokens: 1, stream: false });
  });

  it('forces stream false and strips stream_options even without stream', () => {
    const body: JsonObject = { stream_options: {} };
    capSingleTokenOutput(body, 'completions');
    expect(body).toEqual({ max_tokens: 1, stream: false });
  });

  it('generate: caps inside sampling_params, keeping its other entries', () => {
    const sp = { max_tokens: 50, min_tokens: 5, temperature: 0.2 };
    const body: JsonObject = { token_ids: [1], sampling_params: sp, max_tokens: 7, stream: true };
    const target = capSingleTokenOutput(body, 'generate');
    expect(target).toBe(sp);
    expect(body).toEqual({ token_ids: [1], sampling_params: { max_tokens: 1, temperature: 0.2 }, max_tokens: 7, stream: false });
  });

  it.each([[undefined], [null], ['greedy'], [[1, 2]]])('generate: synthesises sampling_params when it is %j', (sp) => {
    const body: JsonObject = { token_ids: [1] };
    if (sp !== undefined) body['sampling_params'] = sp;
    capSingleTokenOutput(body, 'generate');
    expect(body['sampling_params']).toEqual({ max_tokens: 1 });
  });
});

describe('token ids', () => {
  it('extractTokenIds accepts non-negative integers (integral floats too)', () => {
    expect(extractTokenIds([1, 2345, 6789])).toEqual([1, 2345, 6789]);
    expect(extractTokenIds([5.0, 0])).toEqual([5, 0]);
  });

  it.each([
    ['nil', null, 'token_ids is required'],
    ['absent', undefined, 'token_ids is required'],
    ['not an array', 'hello', 'token_ids must be an array, got string'],
    ['empty', [], 'token_ids must not be empty'],
    ['negative', [-1], 'invalid token at index 0'],
    ['fraction', [1, 1.5], 'invalid token at index 1'],
    ['overflow', [1e19], 'invalid token at index 0'],
    ['string element', [1, 2, 'abc'], 'invalid token at index 2'],
    ['bool element', [true], 'invalid token at index 0'],
  ])('extractTokenIds rejects %s with a 400', (_name, input, msg) => {
    expect(() => extractTokenIds(input)).toThrow(BadRequestError);
    expect(() => extractTokenIds(input)).toThrow(msg);
  });

  it('toTokenIds names the offending element', () => {
    expect(() => toTokenIds([1, 2, null])).toThrow('invalid token at index 2: expected number, got null');
  });
});

describe('extractMultimodalEntries (generate features)', () => {
  const ph = (offset: number, length: number) => ({ offset, length });

  it('returns no entries without features or hashes', () => {
    expect(extractMultimodalEntries(null)).toEqual([]);
    expect(extractMultimodalEntries({})).toEqual([]);
    expect(extractMultimodalEntries({ mm_hashes: null })).toEqual([]);
    expect(extractMultimodalEntries({ mm_hashes: { image: [] } })).toEqual([]);
    expect(extractMultimodalEntries({ mm_hashes: { audio: ['h'] } })).toEqual([]);
  });

  it('reads one and two images in order', () => {
    expect(
      extractMultimodalEntries({
        mm_hashes: { image: ['abc123'] },
        mm_placeholders: { image: [ph(1, 3)] },
        kwargs_data: { image: ['tensordata'] },
      }),
    ).toEqual([{ index: 0, hash: 'abc123', kwargsData: 'tensordata', placeholder: ph(1, 3) }]);
    expect(
      extractMultimodalEntries({
        mm_hashes: { image: ['hash1', 'hash2'] },
        mm_placeholders: { image: [ph(1, 3), ph(5, 2)] },
        kwargs_data: { image: ['d1', 'd2'] },
      }),
    ).toEqual([
      { index: 0, hash: 'hash1', kwargsData: 'd1', placeholder: ph(1, 3) },
      { index: 1, hash: 'hash2', kwargsData: 'd2', placeholder: ph(5, 2) },
    ]);
  });

  it('maps absent kwargs_data and null items to "" (resolve from the encoder cache)', () => {
    const absent = extractMultimodalEntries({ mm_hashes: { image: ['h'] }, mm_placeholders: { image: [ph(1, 3)] } });
    expect(absent[0]!.kwargsData).toBe('');
    const mixed = extractMultimodalEntries({
      mm_hashes: { image: ['h1', 'h2'] },
      mm_placeholders: { image: [ph(1, 3), ph(4, 3)] },
      kwargs_data: { image: ['dGVuc29y', null] },
    });
    expect(mixed.map((e) => e.kwargsData)).toEqual(['dGVuc29y', '']);
  });

  it.each<[string, JsonObject]>([
    [
      'placeholder count mismatch',
      { mm_hashes: { image: ['a', 'b'] }, mm_placeholders: { image: [ph(1, 3)] }, kwargs_data: { image: ['d1', 'd2'] } },
    ],
    [
      'kwargs count mismatch',
      { mm_hashes: { image: ['a', 'b'] }, mm_placeholders: { image: [ph(1, 3), ph(4, 3)] }, kwargs_data: { image: ['d1'] } },
    ],
    ['kwargs item wrong type', { mm_hashes: { image: ['a'] }, mm_placeholders: { image: [ph(1, 3)] }, kwargs_data: { image: [42] } }],
    ['mm_hashes not an object', { mm_hashes: 'garbage' }],
    ['mm_hashes.image not an array', { mm_hashes: { image: 'garbage' } }],
    ['mm_placeholders not an object', { mm_hashes: { image: ['a'] }, mm_placeholders: 'garbage' }],
    ['mm_placeholders absent', { mm_hashes: { image: ['a'] } }],
    ['kwargs_data not an object', { mm_hashes: { image: ['a'] }, mm_placeholders: { image: [ph(1, 3)] }, kwargs_data: 'garbage' }],
    ['hash not a string', { mm_hashes: { image: [42] }, mm_placeholders: { image: [ph(1, 3)] } }],
    ['placeholder not an object', { mm_hashes: { image: ['a'] }, mm_placeholders: { image: ['not-an-object'] } }],
    ['negative offset', { mm_hashes: { image: ['a'] }, mm_placeholders: { image: [ph(-1, 3)] } }],
    ['negative length', { mm_hashes: { image: ['a'] }, mm_placeholders: { image: [ph(1, -3)] } }],
    ['fractional length', { mm_hashes: { image: ['a'] }, mm_placeholders: { image: [ph(1, 1.5)] } }],
    ['missing offset', { mm_hashes: { image: ['a'] }, mm_placeholders: { image: [{ length: 1 }] } }],
  ])('rejects %s with a 400', (_name, features) => {
    expect(() => extractMultimodalEntries(features)).toThrow(BadRequestError);
  });
});

describe('validateSamplingParams', () => {
  it.each<[string, JsonObject, boolean]>([
    ['absent', {}, false],
    ['null', { sampling_params: null }, false],
    ['object', { sampling_params: { max_tokens: 16 } }, false],
    ['with extra_args', { sampling_params: { extra_args: {} } }, false],
    ['extra_args null', { sampling_params: { extra_args: null } }, false],
    ['array', { sampling_params: [1, 2] }, true],
    ['string', { sampling_params: 'greedy' }, true],
    ['extra_args array', { sampling_params: { extra_args: [1] } }, true],
  ])('%s', (_name, body, fails) => {
    if (fails) expect(() => validateSamplingParams(body)).toThrow(BadRequestError);
    else expect(() => validateSamplingParams(body)).not.toThrow();
  });
});

describe('validatePlaceholderBounds', () => {
  const e = (offset: number, length: number): MultimodalEntry => ({ index: 0, placeholder: { offset, length } });
  it.each<[string, MultimodalEntry[], number, boolean]>([
    ['no entries', [], 4, false],
    ['span fills the prompt', [e(0, 4)], 4, false],
    ['offset+length == count', [e(1, 3)], 4, false],
    ['zero length at the last token', [e(3, 0)], 4, false],
    ['offset == count', [e(4, 0)], 4, true],
    ['offset past the end', [e(5, 1)], 4, true],
    ['span past the end', [e(2, 3)], 4, true],
    ['huge length', [e(0, 2 ** 53)], 4, true],
    ['second entry out of range', [e(0, 1), e(3, 2)], 4, true],
  ])('%s', (_name, entries, count, fails) => {
    if (fails) expect(() => validatePlaceholderBounds(entries, count)).toThrow(BadRequestError);
    else expect(() => validatePlaceholderBounds(entries, count)).not.toThrow();
  });
});

describe('buildMmFeatures', () => {
  const entries: MultimodalEntry[] = [
    { index: 0, hash: 'h0', kwargsData: '', placeholder: { offset: 1, length: 3 } },
    { index: 1, hash: 'h1', kwargsData: 'KW', placeholder: { offset: 5, length: 2 } },
  ];

  it('emits a cache-hit kwargs entry as JSON null, never ""', () => {
    expect(JSON.stringify(buildMmFeatures(entries, true))).toBe(
      '{"mm_hashes":{"image":["h0","h1"]},"mm_placeholders":{"image":[{"offset":1,"length":3},{"offset":5,"length":2}]},"kwargs_data":{"image":[null,"KW"]}}',
    );
    const allNull = buildMmFeatures([entries[0]!, { ...entries[0]!, index: 1 }], true)!;
    expect(allNull.kwargs_data.image).toEqual([null, null]);
  });

  it('omits kwargs_data without includeKwargs, and returns null without entries', () => {
    expect(buildMmFeatures(entries, false)).toEqual({
      mm_hashes: { image: ['h0', 'h1'] },
      mm_placeholders: {
        image: [
          { offset: 1, length: 3 },
          { offset: 5, length: 2 },
        ],
      },
    });
    expect(buildMmFeatures([], true)).toBeNull();
  });
});

describe('transfer params', () => {
  it('setGenerateTransferParams reuses an object extra_args and adds ec only when non-empty', () => {
    const sampling: JsonObject = { extra_args: { keep: 1 } };
    setGenerateTransferParams(sampling, { a: 1 }, {});
    expect(sampling).toEqual({ extra_args: { keep: 1, kv_transfer_params: { a: 1 } } });
    const s2: JsonObject = { extra_args: 'junk' };
    setGenerateTransferParams(s2, {}, { h: { x: 1 } });
    expect(s2).toEqual({ extra_args: { kv_transfer_params: {}, ec_transfer_params: { h: { x: 1 } } } });
    const s3: JsonObject = {};
    setGenerateTransferParams(s3, null, null);
    expect(JSON.stringify(s3)).toBe('{"extra_args":{"kv_transfer_params":null}}');
  });

  it('coerceParamsMap keeps objects (even empty) and drops everything else', () => {
    const log = silentLogger();
    const obj = { a: 1 };
    expect(coerceParamsMap(obj, 'kv_transfer_params', log)).toBe(obj);
    expect(coerceParamsMap({}, 'kv_transfer_params', log)).toEqual({});
    for (const v of [undefined, null, 'str', [1], 3, true]) expect(coerceParamsMap(v, 'kv_transfer_params', log)).toBeNull();
  });
});

describe('decodeFirstJsonValue (Go json.Decoder semantics)', () => {
  it('parses a well-formed body', () => {
    expect(decodeFirstJsonValue(Buffer.from(' {"a":[1,"}"]} '))).toEqual({ a: [1, '}'] });
  });

  it('ignores whatever follows the first value', () => {
    expect(decodeFirstJsonValue(Buffer.from('{"a":"x\\"}"} trailing'))).toEqual({ a: 'x"}' });
    expect(decodeFirstJsonValue(Buffer.from('[1,2]{"b":1}'))).toEqual([1, 2]);
    expect(decodeFirstJsonValue(Buffer.from('nullgarbage'))).toBeNull();
    expect(decodeFirstJsonValue(Buffer.from('12abc'))).toBe(12);
  });

  it('fails on an empty, truncated or broken first value', () => {
    for (const bad of ['', '   ', '{"a":', '{"a":]}', 'garbage', '{"a":1]} x']) {
      expect(() => decodeFirstJsonValue(Buffer.from(bad))).toThrow(SyntaxError);
    }
  });
});

describe('render answers (typed decode)', () => {
  it('reads token ids and image features; null items are zero values', () => {
    const r = decodeChatRenderResponse(
      Buffer.from(
        JSON.stringify({
          token_ids: [1, 2, null],
          request_id: 'ignored',
          features: {
            mm_hashes: { image: ['a', null] },
            mm_placeholders: { image: [{ offset: 8, length: 70 }, null] },
            kwargs_data: { image: [null, 'k'] },
          },
        }),
      ),
    );
    expect(r).toEqual({
      tokenIds: [1, 2, 0],
      hashes: ['a', ''],
      placeholders: [
        { offset: 8, length: 70 },
        { offset: 0, length: 0 },
      ],
      kwargs: ['', 'k'],
    });
  });

  it('treats null / absent fields as unset', () => {
    expect(decodeChatRenderResponse(Buffer.from('null'))).toEqual({ tokenIds: null, hashes: [], placeholders: [], kwargs: [] });
    expect(decodeChatRenderResponse(Buffer.from('{"features":null}'))).toEqual({
      tokenIds: null,
      hashes: [],
      placeholders: [],
      kwargs: [],
    });
  });

  it.each([
    '[]',
    '"x"',
    '{"token_ids":"x"}',
    '{"token_ids":[1.5]}',
    '{"features":[]}',
    '{"features":{"mm_hashes":{"image":[1]}}}',
    '{"features":{"mm_hashes":{"audio":"x"}}}',
    '{"features":{"mm_placeholders":{"image":[{"offset":"1"}]}}}',
  ])('fails to decode %s', (body) => {
    expect(() => decodeChatRenderResponse(Buffer.from(body))).toThrow(Error);
    expect(() => decodeChatRenderResponse(Buffer.from(body))).not.toThrow(BadRequestError);
  });

  it('completions: one element per prompt; null is no elements', () => {
    expect(decodeCompletionsRenderResponse(Buffer.from('[{"token_ids":[3,4],"x":1}]'))).toEqual([[3, 4]]);
    expect(decodeCompletionsRenderResponse(Buffer.from('null'))).toEqual([]);
    expect(decodeCompletionsRenderResponse(Buffer.from('[{},null]'))).toEqual([null, null]);
    expect(() => decodeCompletionsRenderResponse(Buffer.from('{"token_ids":[1]}'))).toThrow(Error);
  });
});
