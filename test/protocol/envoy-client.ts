/**
 * A gRPC client that talks to the ext_proc service the way Envoy's ext_proc filter does: same
 * proto, one bidi `Process` stream per HTTP request, header values in raw_value, protocol_config
 * on the first message only.
 */
import * as grpc from '@grpc/grpc-js';
import { EXT_PROC_SERVICE_NAME, loadExtProcPackage } from '../../src/extproc/proto';

// ---- decoded responses (proto-loader defaults: every field present, unset messages null) ----

export interface HeaderValueOptionMsg {
  header: { key: string; value: string; raw_value: Buffer } | null;
  append: { value: boolean } | null;
  append_action: string;
}
export interface HeaderMutationMsg {
  set_headers: HeaderValueOptionMsg[];
  remove_headers: string[];
}
export interface CommonResponseMsg {
  status: string;
  header_mutation: HeaderMutationMsg | null;
  body_mutation: {
    mutation?: 'body' | 'clear_body' | 'streamed_response';
    body?: Buffer;
    streamed_response?: { body: Buffer; end_of_stream: boolean } | null;
  } | null;
  clear_route_cache: boolean;
}
export interface StructMsg {
  fields: Record<string, ValueMsg>;
}
/** Well-known types keep protobufjs's camelCase names even with keepCase. */
export interface ValueMsg {
  kind: 'nullValue' | 'numberValue' | 'stringValue' | 'boolValue' | 'structValue' | 'listValue';
  nullValue?: string;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: StructMsg | null;
  listValue?: { values: ValueMsg[] } | null;
}
export interface ProcessingResponseMsg {
  response: string;
  request_headers?: { response: CommonResponseMsg | null } | null;
  response_headers?: { response: CommonResponseMsg | null } | null;
  request_body?: { response: CommonResponseMsg | null } | null;
  response_body?: { response: CommonResponseMsg | null } | null;
  request_trailers?: { header_mutation: HeaderMutationMsg | null } | null;
  response_trailers?: { header_mutation: HeaderMutationMsg | null } | null;
  immediate_response?: {
    status: { code: string } | null;
    headers: HeaderMutationMsg | null;
    body: Buffer;
    details: string;
  } | null;
  streamed_immediate_response?: {
    response?: 'headers_response' | 'body_response' | 'trailers_response';
    headers_response?: {
      headers: { headers: Array<{ key: string; value: string; raw_value: Buffer }> } | null;
      end_of_stream: boolean;
    } | null;
    body_response?: { body: Buffer; end_of_stream: boolean } | null;
  } | null;
  dynamic_metadata: StructMsg | null;
}

export type BodyModeName = 'NONE' | 'STREAMED' | 'BUFFERED' | 'BUFFERED_PARTIAL' | 'FULL_DUPLEX_STREAMED';

export interface HeadersOptions {
  endOfStream?: boolean;
  /** Announce the request body mode as Envoy >= 1.34 does; omit to act as an older Envoy. */
  requestBodyMode?: BodyModeName;
  responseBodyMode?: BodyModeName;
  /** Send values in `value` instead of `raw_value` (Envoy < 1.32). */
  legacyValues?: boolean;
}

const NEXT_TIMEOUT_MS = 10_000;

/** One `Process` stream, from Envoy's side. */
export class EnvoyStream {
  private readonly queue: ProcessingResponseMsg[] = [];
  private readonly waiters: Array<{ resolve: (m: ProcessingResponseMsg | null) => void }> = [];
  private ended = false;
  private first = true;
  readonly status: Promise<grpc.StatusObject>;

  constructor(private readonly call: grpc.ClientDuplexStream<object, ProcessingResponseMsg>) {
    call.on('data', (msg: ProcessingResponseMsg) => {
      const w = this.waiters.shift();
      if (w) w.resolve(msg);
      else this.queue.push(msg);
    });
    this.status = new Promise((resolve) => call.on('status', resolve));
    const finish = (): void => {
      this.ended = true;
      for (const w of this.waiters.splice(0)) w.resolve(null);
    };
    call.on('end', finish);
    call.on('error', finish); // a CANCELLED/INTERNAL status surfaces as an error on the client
  }

  private sendRaw(msg: Record<string, unknown>, opts?: HeadersOptions): void {
    if (this.first) {
      this.first = false;
      if (opts?.requestBodyMode) {
        msg.protocol_config = {
          request_body_mode: opts.requestBodyMode,
          response_body_mode: opts.responseBodyMode ?? 'NONE',
          send_body_without_waiting_for_header_response: false,
        };
      }
    }
    this.call.write(msg);
  }

  sendHeaders(headers: Array<[string, string]>, opts: HeadersOptions = {}): void {
    const list = headers.map(([key, value]) => (opts.legacyValues ? { key, value } : { key, raw_value: Buffer.from(value, 'latin1') }));
    this.sendRaw({ request_headers: { headers: { headers: list }, end_of_stream: opts.endOfStream ?? false } }, opts);
  }

  sendBody(body: Buffer, endOfStream: boolean, opts?: HeadersOptions): void {
    this.sendRaw({ request_body: { body, end_of_stream: endOfStream } }, opts);
  }

  /** Sends `body` as chunks of `chunkBytes`, end_of_stream on the last one if asked. */
  sendBodyChunks(body: Buffer, chunkBytes: number, endOfStream: boolean): number {
    let n = 0;
    for (let off = 0; off < body.length; off += chunkBytes) {
      const end = Math.min(off + chunkBytes, body.length);
      this.sendBody(body.subarray(off, end), endOfStream && end === body.length);
      n++;
    }
    return n;
  }

  sendTrailers(trailers: Array<[string, string]> = [['x-trailer', '1']]): void {
    this.sendRaw({
      request_trailers: { trailers: { headers: trailers.map(([key, value]) => ({ key, raw_value: Buffer.from(value) })) } },
    });
  }

  sendResponseHeaders(): void {
    this.sendRaw({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } });
  }

  sendResponseBody(body: Buffer, endOfStream: boolean): void {
    this.sendRaw({ response_body: { body, end_of_stream: endOfStream } });
  }

  sendResponseTrailers(): void {
    this.sendRaw({ response_trailers: { trailers: { headers: [] } } });
  }

  /** The next response; fails the test (instead of hanging it) if none comes. */
  async next(): Promise<ProcessingResponseMsg> {
    const msg = await this.nextOrEnd();
    if (!msg) throw new Error('stream ended while a response was expected');
    return msg;
  }

  /** The next response, or null once the server ended the stream. */
  nextOrEnd(): Promise<ProcessingResponseMsg | null> {
    const queued = this.queue.shift();
    if (queued) return Promise.resolve(queued);
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no response from the ext_proc server')), NEXT_TIMEOUT_MS);
      this.waiters.push({
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m);
        },
      });
    });
  }

  /** Everything the server still sends until it ends the stream. */
  async rest(): Promise<ProcessingResponseMsg[]> {
    const out: ProcessingResponseMsg[] = [];
    for (;;) {
      const msg = await this.nextOrEnd();
      if (!msg) return out;
      out.push(msg);
    }
  }

  /** Stop reading responses (a slow downstream): the server's writes back up. */
  pause(): void {
    this.call.pause();
  }

  resume(): void {
    this.call.resume();
  }

  /** Half-close, as Envoy does when it expects nothing more. */
  end(): void {
    this.call.end();
  }

  /** Reset, as an older Envoy (or a client disconnect) does. */
  cancel(): void {
    this.call.cancel();
  }
}

export class EnvoyClient {
  private readonly client: grpc.Client & {
    Process(metadata?: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<object, ProcessingResponseMsg>;
  };

  constructor(port: number, credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure()) {
    const pkg = grpc.loadPackageDefinition(loadExtProcPackage());
    const path = EXT_PROC_SERVICE_NAME.split('.');
    let ctor: unknown = pkg;
    for (const part of path) ctor = (ctor as Record<string, unknown>)[part];
    const Client = ctor as grpc.ServiceClientConstructor;
    this.client = new Client(`127.0.0.1:${port}`, credentials, {
      'grpc.max_receive_message_length': -1,
      'grpc.max_send_message_length': -1,
      // The test certificates name `localhost` (and 127.0.0.1); SNI must be a host name.
      'grpc.ssl_target_name_override': 'localhost',
    }) as unknown as EnvoyClient['client'];
  }

  /** `metadata`: what the filter's grpc_service.initial_metadata adds; `options`: e.g. a deadline. */
  open(metadata?: grpc.Metadata, options?: grpc.CallOptions): EnvoyStream {
    return new EnvoyStream(metadata || options ? this.client.Process(metadata ?? new grpc.Metadata(), options) : this.client.Process());
  }

  close(): void {
    this.client.close();
  }
}

// ---- small readers for assertions ----

export function headerEntries(mutation: HeaderMutationMsg | null | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of mutation?.set_headers ?? []) {
    if (h.header) out[h.header.key] = h.header.raw_value.toString('latin1');
  }
  return out;
}

/** google.protobuf.Struct (decoded) -> plain JSON. */
export function structToJson(s: StructMsg | null | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s?.fields ?? {})) out[k] = valueToJson(v);
  return out;
}

function valueToJson(v: ValueMsg): unknown {
  switch (v.kind) {
    case 'nullValue':
      return null;
    case 'numberValue':
      return v.numberValue;
    case 'stringValue':
      return v.stringValue;
    case 'boolValue':
      return v.boolValue;
    case 'structValue':
      return structToJson(v.structValue);
    case 'listValue':
      return (v.listValue?.values ?? []).map(valueToJson);
    default:
      return undefined;
  }
}
