/**
 * The ext_proc messages as @grpc/proto-loader hands them over (keepCase, enums as names,
 * defaults, oneofs) and as we hand them back. Only the fields this service reads or writes are
 * typed; see proto/envoy/service/ext_proc/v3/external_processor.proto for the full contract.
 */

export type BodySendModeName = 'NONE' | 'STREAMED' | 'BUFFERED' | 'BUFFERED_PARTIAL' | 'FULL_DUPLEX_STREAMED' | 'GRPC';

// ---- Envoy -> us (decoded; unset message fields are null, unknown enum values stay numbers) ----

export interface HeaderValueIn {
  readonly key: string;
  readonly value: string;
  readonly raw_value: Buffer;
}

export interface HeaderMapIn {
  readonly headers: readonly HeaderValueIn[];
}

export interface HttpHeadersIn {
  readonly headers: HeaderMapIn | null;
  readonly end_of_stream: boolean;
}

export interface HttpBodyIn {
  readonly body: Buffer;
  readonly end_of_stream: boolean;
}

export interface HttpTrailersIn {
  readonly trailers: HeaderMapIn | null;
}

export interface ProtocolConfigurationIn {
  readonly request_body_mode: BodySendModeName | number;
  readonly response_body_mode: BodySendModeName | number;
  readonly send_body_without_waiting_for_header_response: boolean;
}

export type RequestKind =
  'request_headers' | 'response_headers' | 'request_body' | 'response_body' | 'request_trailers' | 'response_trailers';

export interface ProcessingRequestIn {
  /** The oneof member that is set (proto-loader `oneofs: true`). */
  readonly request?: RequestKind;
  readonly request_headers?: HttpHeadersIn | null;
  readonly response_headers?: HttpHeadersIn | null;
  readonly request_body?: HttpBodyIn | null;
  readonly response_body?: HttpBodyIn | null;
  readonly request_trailers?: HttpTrailersIn | null;
  readonly response_trailers?: HttpTrailersIn | null;
  readonly observability_mode?: boolean;
  readonly protocol_config?: ProtocolConfigurationIn | null;
}

// ---- us -> Envoy ----

export interface HeaderValueOptionOut {
  readonly header: { readonly key: string; readonly raw_value: Buffer };
  /** Envoy's ext_proc reads only the (unset = overwrite) `append` flag; this keeps newer Envoy aligned. */
  readonly append_action: 'OVERWRITE_IF_EXISTS_OR_ADD';
}

export interface HeaderMutationOut {
  readonly set_headers: readonly HeaderValueOptionOut[];
  readonly remove_headers: readonly string[];
}

export interface StreamedBodyResponseOut {
  readonly body: Buffer;
  readonly end_of_stream: boolean;
}

export type BodyMutationOut = { readonly body: Buffer } | { readonly streamed_response: StreamedBodyResponseOut };

export interface CommonResponseOut {
  readonly header_mutation?: HeaderMutationOut;
  readonly body_mutation?: BodyMutationOut;
  readonly clear_route_cache?: boolean;
}

export interface HeadersResponseOut {
  readonly response?: CommonResponseOut;
}

export interface BodyResponseOut {
  readonly response?: CommonResponseOut;
}

export interface TrailersResponseOut {
  readonly header_mutation?: HeaderMutationOut;
}

export interface ImmediateResponseOut {
  /** A code the envoy.type.v3.StatusCode enum defines (see status.ts). */
  readonly status: { readonly code: number };
  readonly headers?: HeaderMutationOut;
  readonly body?: Buffer;
  readonly details?: string;
}

/** One message of a streamed local reply (Envoy >= 1.37): headers first, then body chunks. */
export type StreamedImmediateResponseOut =
  | {
      readonly headers_response: {
        readonly headers: { readonly headers: ReadonlyArray<{ readonly key: string; readonly raw_value: Buffer }> };
        readonly end_of_stream: boolean;
      };
    }
  | { readonly body_response: StreamedBodyResponseOut };

/**
 * google.protobuf.Value in proto-loader object form. The well-known types come from protobufjs's
 * bundled definitions, whose field names are camelCase whatever `keepCase` says: `struct_value`
 * would be silently dropped on the wire.
 */
export type StructValueOut =
  | { readonly nullValue: 'NULL_VALUE' }
  | { readonly numberValue: number }
  | { readonly stringValue: string }
  | { readonly boolValue: boolean }
  | { readonly structValue: StructOut }
  | { readonly listValue: { readonly values: readonly StructValueOut[] } };

/** google.protobuf.Struct in proto-loader object form. */
export interface StructOut {
  readonly fields: Readonly<Record<string, StructValueOut>>;
}

type OneResponse =
  | { readonly request_headers: HeadersResponseOut }
  | { readonly response_headers: HeadersResponseOut }
  | { readonly request_body: BodyResponseOut }
  | { readonly response_body: BodyResponseOut }
  | { readonly request_trailers: TrailersResponseOut }
  | { readonly response_trailers: TrailersResponseOut }
  | { readonly immediate_response: ImmediateResponseOut }
  | { readonly streamed_immediate_response: StreamedImmediateResponseOut };

export type ProcessingResponseOut = OneResponse & { readonly dynamic_metadata?: StructOut };
