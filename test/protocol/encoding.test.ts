/** The pieces of the wire contract that need no stream: status codes, metadata, limits, protos. */
import { envoyStatusCode, extProcServerOptions, messageLimits } from '../../src/extproc';
import { MAX_METADATA_DEPTH, toDynamicMetadata } from '../../src/extproc/dynamic-metadata';
import { loadExtProcPackage } from '../../src/extproc/proto';
import { ENVOY_STATUS_CODES } from '../../src/extproc/status';
import type { Metadata } from '../../src/pipeline/decision';
import { structToJson, type ProcessingResponseMsg } from './envoy-client';

interface EnumDefinition {
  type: { value: Array<{ name: string; number: number }> };
}
interface MethodDefinition {
  responseSerialize(value: object): Buffer;
  responseDeserialize(bytes: Buffer): ProcessingResponseMsg;
}

const pkg = loadExtProcPackage();
const processMethod = (pkg['envoy.service.ext_proc.v3.ExternalProcessor'] as unknown as Record<string, MethodDefinition>).Process!;

function roundTrip(msg: object): ProcessingResponseMsg {
  return processMethod.responseDeserialize(processMethod.responseSerialize(msg));
}

describe('status codes', () => {
  it('our table is exactly the StatusCode enum of the proto (minus Empty)', () => {
    const values = (pkg['envoy.type.v3.StatusCode'] as unknown as EnumDefinition).type.value.map((v) => v.number).filter((n) => n !== 0);
    expect([...ENVOY_STATUS_CODES].sort((a, b) => a - b)).toEqual(values.sort((a, b) => a - b));
  });

  it.each([
    [200, 200],
    [412, 412],
    [429, 429],
    [499, 400],
    [418, 400],
    [451, 400],
    [509, 500],
    [599, 500],
    [209, 200],
    [306, 300],
    [100, 200],
    [0, 200],
    [-1, 200],
    [600, 500],
    [Number.NaN, 500],
    [404.5, 500],
  ])('%p -> %p', (input, expected) => {
    expect(envoyStatusCode(input)).toBe(expected);
    expect(ENVOY_STATUS_CODES.has(envoyStatusCode(input))).toBe(true);
  });
});

describe('dynamic metadata', () => {
  it('survives the wire as a Struct under the namespace, nested values intact', () => {
    const metadata: Metadata = {
      request_id: 'r-1',
      path: 'cascade',
      tokens: 1234,
      ratio: 0.25,
      hit: true,
      error: null,
      steps: [
        { name: 'encode', ms: 3 },
        { name: 'prefill', ms: 812 },
      ],
      nested: { a: { b: ['x', 1, false, null] } },
    };
    const decoded = roundTrip({ request_headers: {}, dynamic_metadata: toDynamicMetadata('epd.coordinator', metadata) });
    expect(structToJson(decoded.dynamic_metadata)).toEqual({ 'epd.coordinator': metadata });
  });

  it('emits nothing for empty metadata', () => {
    expect(toDynamicMetadata('ns', {})).toBeUndefined();
  });

  it('turns non-finite numbers into null and cuts overly deep trees', () => {
    let deep: Metadata[string] = 'leaf';
    for (let i = 0; i < MAX_METADATA_DEPTH + 5; i++) deep = { d: deep };
    const decoded = roundTrip({
      request_headers: {},
      dynamic_metadata: toDynamicMetadata('ns', { nan: Number.NaN, inf: Number.POSITIVE_INFINITY, deep }),
    });
    const json = structToJson(decoded.dynamic_metadata).ns as Record<string, unknown>;
    expect(json.nan).toBeNull();
    expect(json.inf).toBeNull();
    let depth = 0;
    let node: unknown = json.deep;
    while (node && typeof node === 'object') {
      node = (node as Record<string, unknown>).d;
      depth++;
    }
    expect(node).toBeNull();
    expect(depth).toBeLessThan(MAX_METADATA_DEPTH);
  });

  it('keeps a "__proto__" key as an ordinary field', () => {
    const metadata = JSON.parse('{"__proto__":{"polluted":true},"ok":1}') as Metadata;
    const decoded = roundTrip({ request_headers: {}, dynamic_metadata: toDynamicMetadata('ns', metadata) });
    expect(Object.keys(decoded.dynamic_metadata!.fields.ns!.structValue!.fields).sort()).toEqual(['__proto__', 'ok']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});

describe('message limits', () => {
  it('receive limit fits a whole BUFFERED body plus 1 MiB, send limit a body twice as large', () => {
    const mib = 1024 * 1024;
    expect(messageLimits(64 * mib)).toEqual({ receiveBytes: 129 * mib, sendBytes: 129 * mib, responseBodyBytes: 128 * mib });
    expect(extProcServerOptions(64 * mib)).toEqual({
      'grpc.max_receive_message_length': 129 * mib,
      'grpc.max_send_message_length': 129 * mib,
    });
  });

  it('stays within int32 and rejects nonsense', () => {
    expect(messageLimits(2 ** 31).receiveBytes).toBe(2 ** 31 - 1);
    expect(() => messageLimits(0)).toThrow(RangeError);
    expect(() => messageLimits(Number.NaN)).toThrow(RangeError);
  });
});

describe('proto field numbers (the wire contract with Envoy)', () => {
  type Field = { name: string; number: number };
  function fields(typeName: string): Record<string, number> {
    const def = pkg[typeName] as unknown as { type: { field: Field[] } };
    return Object.fromEntries(def.type.field.map((f) => [f.name, f.number]));
  }

  it('ProcessingRequest / ProcessingResponse', () => {
    expect(fields('envoy.service.ext_proc.v3.ProcessingRequest')).toEqual({
      request_headers: 2,
      response_headers: 3,
      request_body: 4,
      response_body: 5,
      request_trailers: 6,
      response_trailers: 7,
      metadata_context: 8,
      attributes: 9,
      observability_mode: 10,
      protocol_config: 11,
    });
    expect(fields('envoy.service.ext_proc.v3.ProcessingResponse')).toEqual({
      request_headers: 1,
      response_headers: 2,
      request_body: 3,
      response_body: 4,
      request_trailers: 5,
      response_trailers: 6,
      immediate_response: 7,
      dynamic_metadata: 8,
      mode_override: 9,
      override_message_timeout: 10,
      streamed_immediate_response: 11,
    });
  });

  it('mutations, immediate responses and streamed pieces', () => {
    expect(fields('envoy.service.ext_proc.v3.CommonResponse')).toEqual({
      status: 1,
      header_mutation: 2,
      body_mutation: 3,
      trailers: 4,
      clear_route_cache: 5,
    });
    expect(fields('envoy.service.ext_proc.v3.BodyMutation')).toEqual({ body: 1, clear_body: 2, streamed_response: 3 });
    expect(fields('envoy.service.ext_proc.v3.ImmediateResponse')).toEqual({ status: 1, headers: 2, body: 3, grpc_status: 4, details: 5 });
    expect(fields('envoy.service.ext_proc.v3.StreamedImmediateResponse')).toEqual({
      headers_response: 1,
      body_response: 2,
      trailers_response: 3,
    });
    expect(fields('envoy.config.core.v3.HeaderValue')).toEqual({ key: 1, value: 2, raw_value: 3 });
    expect(fields('envoy.config.core.v3.HeaderValueOption')).toEqual({ header: 1, append: 2, append_action: 3, keep_empty_value: 4 });
    expect(fields('envoy.service.ext_proc.v3.ProtocolConfiguration')).toEqual({
      request_body_mode: 1,
      response_body_mode: 2,
      send_body_without_waiting_for_header_response: 3,
    });
  });
});
