/**
 * The fast ProcessingRequest decoder (src/extproc/request-decoder.ts) gives exactly what
 * proto-loader's deserializer gives: the same object for every message, or the same failure.
 * Checked on the messages Envoy sends, on every field of the proto (the rare ones go to the
 * reference), and on bytes that are not a message at all.
 */
import fc from 'fast-check';
import { extProcServiceDefinition } from '../../../src/extproc/proto';
import { fastRequestDecoder } from '../../../src/extproc/request-decoder';
import { fuzzSeed } from '../../fuzz/support/settings';

const RUNS = { numRuns: 500, seed: fuzzSeed() };

const method = extProcServiceDefinition()['Process']!;
const serialize = method.requestSerialize as (m: object) => Buffer;
const reference = method.requestDeserialize as (b: Buffer) => unknown;
let handedOn = 0;
const fast = fastRequestDecoder((b) => {
  handedOn++;
  return reference(b) as never;
});

/** Both decoders on the same bytes: equal objects, or both throw. */
function expectSame(bytes: Buffer): void {
  let want: unknown;
  let wantErr = false;
  try {
    want = reference(bytes);
  } catch {
    wantErr = true;
  }
  if (wantErr) {
    expect(() => fast(bytes)).toThrow();
    return;
  }
  expect(fast(bytes)).toStrictEqual(want);
}

const header = fc.record(
  {
    key: fc.string({ maxLength: 12 }),
    value: fc.string({ maxLength: 12 }),
    raw_value: fc.uint8Array({ maxLength: 16 }).map((a) => Buffer.from(a)),
  },
  { requiredKeys: [] },
);
const headerMap = fc.record({ headers: fc.array(header, { maxLength: 6 }) });
const struct = fc.constant({ fields: { a: { stringValue: 'x' } } });
const httpHeaders = fc.record(
  { headers: headerMap, end_of_stream: fc.boolean(), attributes: fc.dictionary(fc.constantFrom('a', 'b'), struct, { maxKeys: 1 }) },
  { requiredKeys: [] },
);
const httpBody = fc.record(
  {
    body: fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)),
    end_of_stream: fc.boolean(),
    end_of_stream_without_message: fc.boolean(),
    grpc_message_compressed: fc.boolean(),
  },
  { requiredKeys: [] },
);
const httpTrailers = fc.record({ trailers: headerMap }, { requiredKeys: [] });
const mode = fc.oneof(
  fc.constantFrom('NONE', 'STREAMED', 'BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED', 'GRPC'),
  fc.integer({ min: -3, max: 40 }),
);
const protocolConfig = fc.record(
  { request_body_mode: mode, response_body_mode: mode, send_body_without_waiting_for_header_response: fc.boolean() },
  { requiredKeys: [] },
);
const member = fc.oneof(
  httpHeaders.map((v) => ({ request_headers: v })),
  httpHeaders.map((v) => ({ response_headers: v })),
  httpBody.map((v) => ({ request_body: v })),
  httpBody.map((v) => ({ response_body: v })),
  httpTrailers.map((v) => ({ request_trailers: v })),
  httpTrailers.map((v) => ({ response_trailers: v })),
  fc.constant({}),
);
const request = fc
  .record(
    {
      member,
      observability_mode: fc.boolean(),
      protocol_config: protocolConfig,
      metadata_context: fc.constant({ filter_metadata: { ns: { fields: { k: { numberValue: 1 } } } } }),
      attributes: fc.dictionary(fc.constantFrom('x', 'y'), struct, { maxKeys: 1 }),
    },
    { requiredKeys: ['member'] },
  )
  .map(({ member: m, ...rest }) => ({ ...m, ...rest }));

describe('the fast ProcessingRequest decoder', () => {
  it("gives proto-loader's object for the messages Envoy sends", () => {
    const hv = (key: string, v: string) => ({ key, raw_value: Buffer.from(v) });
    const cases = [
      {
        request_headers: {
          headers: { headers: [hv(':method', 'POST'), hv(':path', '/v1/chat/completions'), hv('x', 'é')] },
          end_of_stream: false,
        },
        protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'NONE' },
      },
      { request_headers: { headers: { headers: [{ key: 'legacy', value: 'v' }] }, end_of_stream: true } },
      { request_body: { body: Buffer.from('{"model":"m"}'), end_of_stream: true } },
      // Envoy puts an empty metadata_context on every message.
      { request_body: { end_of_stream: true }, metadata_context: {} },
      { request_body: { body: Buffer.alloc(0), end_of_stream: false } },
      { request_trailers: { trailers: { headers: [hv('x-trailer', '1')] } } },
      { response_headers: { headers: { headers: [hv(':status', '200')] } } },
      { response_body: { body: Buffer.from('data: 1\n\n'), end_of_stream: false } },
      { response_trailers: { trailers: { headers: [] } } },
      { observability_mode: true, request_body: { body: Buffer.from('x') } },
      { protocol_config: { request_body_mode: 99 } },
      {},
    ];
    handedOn = 0;
    for (const c of cases) expectSame(serialize(c));
    // All of them on the fast path: none was handed to the reference decoder.
    expect(handedOn).toBe(0);
  });

  it('gives the same object for any message of the proto, rare fields included', () => {
    fc.assert(
      fc.property(request, (r) => expectSame(serialize(r))),
      RUNS,
    );
  });

  it('gives the same object or the same failure for two messages run together, truncated or mutated ones', () => {
    fc.assert(
      fc.property(request, request, fc.nat(), fc.nat(), fc.integer({ min: 0, max: 255 }), (a, b, cut, at, byte) => {
        const one = serialize(a);
        const two = Buffer.concat([one, serialize(b)]);
        expectSame(two); // protobuf merges a repeated message: the reference decides
        expectSame(one.subarray(0, one.length === 0 ? 0 : cut % one.length));
        if (one.length > 0) {
          const mutated = Buffer.from(one);
          mutated[at % one.length] = byte;
          expectSame(mutated);
        }
      }),
      RUNS,
    );
  });

  it('gives the same failure, or object, for random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => expectSame(Buffer.from(bytes))),
      RUNS,
    );
  });
});
