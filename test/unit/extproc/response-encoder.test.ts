/**
 * The fast ProcessingResponse encoder (src/extproc/response-encoder.ts) writes what proto-loader's
 * serializer writes: both encoders' bytes decode to the same message, for every kind of answer the
 * service builds (responses.ts, streamed-response.ts, dynamic-metadata.ts) and for random ones of the
 * same shapes. A message of another kind goes to the reference serializer.
 */
import fc from 'fast-check';
import { toDynamicMetadata } from '../../../src/extproc/dynamic-metadata';
import { extProcServiceDefinition } from '../../../src/extproc/proto';
import { fastResponseEncoder } from '../../../src/extproc/response-encoder';
import {
  EMPTY_REQUEST_BODY,
  EMPTY_REQUEST_HEADERS,
  EMPTY_REQUEST_TRAILERS,
  EMPTY_RESPONSE_BODY,
  EMPTY_RESPONSE_HEADERS,
  EMPTY_RESPONSE_TRAILERS,
  bufferedForwardBodyResponse,
  forwardHeadersResponse,
  immediateResponse,
  internalErrorResponse,
  streamedRequestChunk,
  streamedResponseChunk,
} from '../../../src/extproc/responses';
import { streamedBodyChunk, streamedHeadersResponse } from '../../../src/extproc/streamed-response';
import type { ProcessingResponseOut } from '../../../src/extproc/wire';
import type { ForwardDecision } from '../../../src/pipeline/decision';
import { fuzzSeed } from '../../fuzz/support/settings';

const RUNS = { numRuns: 400, seed: fuzzSeed() };
const method = extProcServiceDefinition()['Process']!;
const reference = method.responseSerialize as (m: ProcessingResponseOut) => Buffer;
const decode = method.responseDeserialize as (b: Buffer) => unknown;
let handedOn = 0;
const fast = fastResponseEncoder((m) => {
  handedOn++;
  return reference(m);
});

function expectSame(msg: ProcessingResponseOut): void {
  const before = handedOn;
  const bytes = Buffer.from(fast(msg));
  expect(handedOn).toBe(before);
  expect(decode(bytes)).toStrictEqual(decode(reference(msg)));
}

const forward = (over: Partial<ForwardDecision> = {}): ForwardDecision =>
  ({
    kind: 'forward',
    setHeaders: { 'x-gateway-destination-endpoint': '10.0.0.1:8000', 'x-request-id': 'r-1', 'x-épd': 'é' },
    removeHeaders: ['x-client-thing', 'content-length'],
    body: Buffer.from('{"model":"m","prompt":"p"}'),
    metadata: { step: 'render', token_count: 12, disaggregation: 'disaggregated', nested: { a: [1, 'b', true, null] } },
    ...over,
  }) as unknown as ForwardDecision;

const metadata = toDynamicMetadata('epd.coordinator', {
  parse_ms: 0.25,
  token_count: 1234,
  flag: false,
  none: null,
  list: [1, 2.5, 'x', { deep: { deeper: 'y' } }],
});

test('every answer the service builds encodes as the reference does', () => {
  const cases: ProcessingResponseOut[] = [
    EMPTY_REQUEST_HEADERS,
    EMPTY_REQUEST_BODY,
    EMPTY_REQUEST_TRAILERS,
    EMPTY_RESPONSE_HEADERS,
    EMPTY_RESPONSE_BODY,
    EMPTY_RESPONSE_TRAILERS,
    streamedRequestChunk(Buffer.from('chunk'), false),
    streamedRequestChunk(Buffer.alloc(0), true),
    streamedResponseChunk(Buffer.alloc(70_000, 7), true),
    forwardHeadersResponse(forward(), { removeContentLength: true, metadata }),
    forwardHeadersResponse(forward({ setHeaders: {}, removeHeaders: [] }), { removeContentLength: false, metadata: undefined }),
    bufferedForwardBodyResponse(forward(), { metadata }),
    bufferedForwardBodyResponse(forward({ body: null }), { metadata: undefined }),
    immediateResponse(429, { 'content-type': 'application/json', 'retry-after': '1' }, Buffer.from('{"error":{}}'), { metadata }),
    immediateResponse(200, {}, Buffer.alloc(0), { metadata: undefined, details: 'x' }),
    internalErrorResponse(),
    streamedHeadersResponse(200, { 'content-type': 'text/event-stream', 'x-ünicode': 'ü' }, { metadata }),
    streamedBodyChunk(Buffer.from('data: {}\n\n'), false),
    streamedBodyChunk(Buffer.alloc(0), true),
  ];
  for (const c of cases) expectSame(c);
});

const text = fc.string({ unit: 'binary', maxLength: 40 });
const bytes = fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a));
const header = fc.record({ key: text, raw_value: bytes });
const option = header.map((h) => ({ header: h, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' as const }));
const mutation = fc.record({ set_headers: fc.array(option, { maxLength: 6 }), remove_headers: fc.array(text, { maxLength: 4 }) });
const streamed = fc.record({ body: bytes, end_of_stream: fc.boolean() });
const common = fc.record(
  {
    header_mutation: mutation,
    body_mutation: fc.oneof(fc.record({ body: bytes }), fc.record({ streamed_response: streamed })),
    clear_route_cache: fc.boolean(),
  },
  { requiredKeys: [] },
);
const value: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.constant({ nullValue: 'NULL_VALUE' }),
    fc.double({ noNaN: true }).map((n) => ({ numberValue: n })),
    text.map((s) => ({ stringValue: s })),
    fc.boolean().map((b) => ({ boolValue: b })),
    tie('struct').map((s) => ({ structValue: s })),
    fc.array(tie('value'), { maxLength: 3 }).map((values) => ({ listValue: { values } })),
  ),
  struct: fc.dictionary(text, tie('value'), { maxKeys: 3 }).map((fields) => ({ fields })),
})).value;
const struct = fc.dictionary(text, value, { maxKeys: 4 }).map((fields) => ({ fields }));
const response = fc.oneof(
  fc.record({ request_headers: fc.record({ response: common }, { requiredKeys: [] }) }),
  fc.record({ response_headers: fc.record({ response: common }, { requiredKeys: [] }) }),
  fc.record({ request_body: fc.record({ response: common }, { requiredKeys: [] }) }),
  fc.record({ response_body: fc.record({ response: common }, { requiredKeys: [] }) }),
  fc.record({ request_trailers: fc.record({ header_mutation: mutation }, { requiredKeys: [] }) }),
  fc.record({
    immediate_response: fc.record(
      { status: fc.record({ code: fc.constantFrom(200, 400, 413, 429, 500, 503) }), headers: mutation, body: bytes, details: text },
      { requiredKeys: ['status'] },
    ),
  }),
  fc.record({
    streamed_immediate_response: fc.oneof(
      fc.record({
        headers_response: fc.record({ headers: fc.record({ headers: fc.array(header, { maxLength: 5 }) }), end_of_stream: fc.boolean() }),
      }),
      fc.record({ body_response: streamed }),
    ),
  }),
);

test('random answers of the same shapes encode as the reference does', () => {
  fc.assert(
    fc.property(response, fc.option(struct, { nil: undefined }), (r, meta) => {
      expectSame((meta ? { ...r, dynamic_metadata: meta } : r) as ProcessingResponseOut);
    }),
    RUNS,
  );
});

test('a message of another kind goes to the reference serializer', () => {
  const before = handedOn;
  const msg = { request_headers: {}, mode_override: { request_body_mode: 'BUFFERED' } } as unknown as ProcessingResponseOut;
  expect(decode(Buffer.from(fast(msg)))).toStrictEqual(decode(reference(msg)));
  expect(handedOn).toBe(before + 1);
});

test('metadata carries its own fields only, with Object.prototype polluted (the reference serializer takes it), and a "__proto__" field', () => {
  const meta = toDynamicMetadata('epd.coordinator', JSON.parse('{"__proto__":{"x":1},"request_id":"r-1"}') as Record<string, string>)!;
  Object.defineProperty(Object.prototype, 'polluted', { value: { stringValue: 'no' }, enumerable: true, configurable: true });
  const before = handedOn;
  let bytes: Buffer;
  try {
    bytes = Buffer.from(fast({ request_headers: {}, dynamic_metadata: meta } as ProcessingResponseOut));
  } finally {
    delete (Object.prototype as Record<string, unknown>)['polluted'];
  }
  expect(handedOn).toBe(before + 1);
  const decoded = decode(bytes) as { dynamic_metadata: { fields: Record<string, { structValue: { fields: object } }> } };
  expect(Object.keys(decoded.dynamic_metadata.fields)).toEqual(['epd.coordinator']);
  expect(Object.keys(decoded.dynamic_metadata.fields['epd.coordinator']!.structValue.fields).sort()).toEqual(['__proto__', 'request_id']);
});
