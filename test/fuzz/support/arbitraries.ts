/**
 * Generators for hostile requests: bodies that are valid requests with one or more fields the
 * steps read replaced by a value of the wrong type (or a huge, deep or odd one), then optionally
 * damaged at the byte level; and header lists with odd names and values.
 */
import fc from 'fast-check';

export type Kind = 'chat' | 'completions' | 'generate';

export const PATH_OF: Record<Kind, string> = {
  chat: '/v1/chat/completions',
  completions: '/v1/completions',
  generate: '/inference/v1/generate',
};

/** Every field a step reads, per request kind (dot paths; numbers index arrays). */
export const FIELDS: Record<Kind, readonly string[]> = {
  chat: [
    'model',
    'messages',
    'messages.0',
    'messages.0.role',
    'messages.0.content',
    'messages.1.content',
    'messages.1.content.0',
    'messages.1.content.0.type',
    'messages.1.content.0.text',
    'messages.1.content.1',
    'messages.1.content.1.type',
    'messages.1.content.1.image_url',
    'messages.1.content.1.image_url.url',
    'messages.1.content.1.uuid',
    'stream',
    'stream_options',
    'max_tokens',
    'min_tokens',
    'max_completion_tokens',
    'kv_transfer_params',
    'ec_transfer_params',
    'tokens',
    'tokens.token_ids',
    'n',
    'prompt',
  ],
  completions: [
    'model',
    'prompt',
    'prompt.0',
    'max_tokens',
    'min_tokens',
    'stream',
    'stream_options',
    'kv_transfer_params',
    'features',
    'echo',
  ],
  generate: [
    'model',
    'token_ids',
    'token_ids.0',
    'sampling_params',
    'sampling_params.max_tokens',
    'sampling_params.min_tokens',
    'sampling_params.extra_args',
    'sampling_params.extra_args.kv_transfer_params',
    'features',
    'features.mm_hashes',
    'features.mm_hashes.image',
    'features.mm_hashes.image.0',
    'features.mm_placeholders',
    'features.mm_placeholders.image',
    'features.mm_placeholders.image.0',
    'features.mm_placeholders.image.0.offset',
    'features.mm_placeholders.image.0.length',
    'features.kwargs_data',
    'features.kwargs_data.image',
    'features.kwargs_data.image.0',
    'stream',
    'request_id',
  ],
};

const PNG_DATA_URI =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

export function baseBody(kind: Kind): Record<string, unknown> {
  switch (kind) {
    case 'chat':
      return {
        model: 'sim-model',
        messages: [
          { role: 'system', content: 'be brief' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'describe' },
              { type: 'image_url', image_url: { url: PNG_DATA_URI } },
            ],
          },
        ],
        max_tokens: 4,
      };
    case 'completions':
      return { model: 'sim-model', prompt: 'a prompt', max_tokens: 4 };
    case 'generate':
      return {
        model: 'sim-model',
        token_ids: [1, 2, 3, 4, 5, 6, 7, 8],
        sampling_params: { max_tokens: 4 },
        features: {
          mm_hashes: { image: ['h0'] },
          mm_placeholders: { image: [{ offset: 2, length: 3 }] },
          kwargs_data: { image: ['a3c='] },
        },
      };
  }
}

/** Marker strings replaced in the serialised body by text JSON.stringify cannot produce cheaply. */
export const DEEP_ARRAY = '\u0000deep-array\u0000';
export const DEEP_OBJECT = '\u0000deep-object\u0000';

/** A value of the wrong type, or a huge, deep or odd one. */
export const weirdValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 14, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  {
    weight: 14,
    arbitrary: fc.constantFrom<unknown>(
      null,
      true,
      false,
      0,
      -1,
      -0,
      1.5,
      1e308,
      -1e308,
      2 ** 53 + 1,
      2 ** 64,
      '',
      ' ',
      '\u0000',
      '\ud800',
      '\ufeff',
      'image_url',
      'text',
      [],
      {},
      [null],
      [-1],
      [1.5],
      ['a'],
      [[1, 2]],
      [{}],
      { image: 'x' },
      { image: [null] },
      { __proto__: null, constructor: 1 },
      JSON.parse('{"__proto__": {"polluted": true}}'),
      'data:text/html;base64,PGh0bWw+',
      'http://169.254.169.254/latest',
      'http://127.0.0.1:1/x.png',
      'file:///etc/passwd',
      'data:image/png;base64,',
      PNG_DATA_URI,
    ),
  },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 100_000 }).map((n) => 'x'.repeat(n)) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 50_000 }).map((n) => Array.from({ length: n }, (_, i) => i % 50_000)) },
  { weight: 1, arbitrary: fc.constantFrom(DEEP_ARRAY, DEEP_OBJECT) },
  {
    weight: 1,
    arbitrary: fc.array(
      fc.record({
        type: fc.constantFrom('image_url', 'text', 'video_url'),
        image_url: fc.record({ url: fc.constantFrom(PNG_DATA_URI, 'data:image/gif;base64,R0lG', 'nope') }),
      }),
      { maxLength: 12 },
    ),
  },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 64 }) },
);

/** Sets `value` at a dot path, creating containers on the way (arrays for numeric segments). */
export function setPath(root: Record<string, unknown>, path: string, value: unknown): void {
  const parts = path.split('.');
  let cur: Record<string, unknown> | unknown[] = root;
  for (let i = 0; i < parts.length - 1; i++) {
    const key = parts[i]!;
    const nextIsIndex = /^\d+$/.test(parts[i + 1]!);
    let next = (cur as Record<string, unknown>)[key];
    if (typeof next !== 'object' || next === null) {
      next = nextIsIndex ? [] : {};
      (cur as Record<string, unknown>)[key] = next;
    }
    cur = next as Record<string, unknown>;
  }
  // A copy: fast-check may hand the same generated object to two edits, which could tie a cycle.
  (cur as Record<string, unknown>)[parts[parts.length - 1]!] = typeof value === 'object' && value !== null ? structuredClone(value) : value;
}

export interface BodyCase {
  readonly kind: Kind;
  readonly path: string;
  readonly body: Buffer;
  /** The serialised value before byte damage, when it was a JSON object (the client sent valid JSON). */
  readonly jsonObject: boolean;
}

const byteDamage = fc.oneof(
  fc.constant((b: Buffer) => b),
  fc.constant((b: Buffer) => b),
  fc.constant((b: Buffer) => b),
  fc.nat().map((n) => (b: Buffer) => b.subarray(0, b.length === 0 ? 0 : n % b.length)),
  fc.tuple(fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 8 })).map(([n, bytes]) => (b: Buffer) => {
    const at = b.length === 0 ? 0 : n % b.length;
    return Buffer.concat([b.subarray(0, at), Buffer.from(bytes), b.subarray(at)]);
  }),
  // Invalid UTF-8 inside a string value.
  fc
    .constantFrom(
      Buffer.from([0xc3, 0x28]),
      Buffer.from([0xff, 0xfe]),
      Buffer.from([0xed, 0xa0, 0x80]),
      Buffer.from([0xf4, 0x90, 0x80, 0x80]),
    )
    .map((bad) => (b: Buffer) => {
      const at = b.indexOf('"describe"') >= 0 ? b.indexOf('"describe"') + 1 : b.indexOf('"sim-model"') + 1;
      return at > 0 ? Buffer.concat([b.subarray(0, at), bad, b.subarray(at)]) : b;
    }),
  fc.constantFrom('\ufeff', '   \n', 'garbage', '}', ' {}', 'null').map((extra) => (b: Buffer) => Buffer.concat([Buffer.from(extra), b])),
  fc.constantFrom('x', '}', ']', ' {"a":1}', '\u0000').map((extra) => (b: Buffer) => Buffer.concat([b, Buffer.from(extra)])),
);

function serialise(body: unknown): string {
  const text = JSON.stringify(body);
  return text
    .split(JSON.stringify(DEEP_ARRAY))
    .join('['.repeat(20_000) + ']'.repeat(20_000))
    .split(JSON.stringify(DEEP_OBJECT))
    .join('{"a":'.repeat(3_000) + '1' + '}'.repeat(3_000));
}

/** A request body: a valid request, then 0-4 fields replaced, then maybe byte damage. */
export const bodyCase: fc.Arbitrary<BodyCase> = fc
  .constantFrom<Kind>('chat', 'completions', 'generate')
  .chain((kind) =>
    fc.record({
      kind: fc.constant(kind),
      edits: fc.array(fc.tuple(fc.constantFrom(...FIELDS[kind]), weirdValue), { maxLength: 4 }),
      top: fc.oneof({ weight: 20, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) }),
      damage: byteDamage,
    }),
  )
  .map(({ kind, edits, top, damage }) => {
    let value: unknown;
    if (top !== null) {
      value = top;
    } else {
      const body = baseBody(kind);
      for (const [path, v] of edits) {
        try {
          setPath(body, path, v);
        } catch {
          // an edit that cannot apply (e.g. a weird value as an array's length) is skipped
        }
      }
      value = body;
    }
    let text: string;
    try {
      text = serialise(value);
    } catch {
      text = serialise(baseBody(kind));
    }
    const raw = Buffer.from(text, 'utf8');
    const body = damage(raw);
    const jsonObject = body === raw && typeof value === 'object' && value !== null && !Array.isArray(value);
    return { kind, path: PATH_OF[kind], body, jsonObject };
  });

const headerName = fc.oneof(
  fc.constantFrom(
    'content-type',
    'x-request-id',
    'epp-profile',
    'prefer',
    'authorization',
    'x-data-parallel-rank',
    'x-llm-d-pin-host-port',
    'x-gateway-destination-endpoint',
    'content-length',
    'transfer-encoding',
    'connection',
    'host',
    'te',
    'x-ap-mode',
    'x-team',
    '__proto__',
    'constructor',
    'traceparent',
    'accept-encoding',
  ),
  fc.stringMatching(/^[a-z0-9!#$%&'*+.^_`|~-]{1,40}$/),
  fc.string({ unit: 'binary-ascii', minLength: 1, maxLength: 24 }),
);

const headerValue = fc.oneof(
  { weight: 4, arbitrary: fc.string({ unit: 'binary-ascii', maxLength: 64 }) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'prefill',
      'decode',
      'encode',
      'reserve-endpoint',
      'if-available',
      '3',
      '10.0.0.1:8000',
      'a'.repeat(129),
      'ok-id-1',
    ),
  },
  { weight: 1, arbitrary: fc.constantFrom('a\r\nx-injected: 1', 'a\nx-injected: 1', 'a\rb', 'a\u0000b', '\u00ff\u00fe', '  padded  ') },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 20_000 }).map((n) => 'v'.repeat(n)) },
);

export const headerList: fc.Arbitrary<Array<[string, string]>> = fc.array(fc.tuple(headerName, headerValue), { maxLength: 12 });
