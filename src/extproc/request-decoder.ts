/**
 * A ProcessingRequest decoder for the messages Envoy really sends, building exactly the object
 * proto-loader's deserializer builds (keepCase, enums as names, defaults, oneofs: wire.ts), at a
 * fraction of its cost: proto-loader decodes into protobufjs message objects and then copies them
 * into plain ones, field by field with every default, which made decoding a request's headers
 * several times dearer than the rest of the message's way through the transport.
 *
 * It reads the fields ProcessStream can see: the six `request` members, observability_mode and
 * protocol_config, headers and bodies, and the empty metadata_context Envoy puts on every message.
 * Anything else (attributes, a metadata_context with content, an unknown or repeated field, a wire
 * type out of place, a malformed or truncated message) is handed to the reference decoder, so that
 * an odd message gets the same object, or the same error, as before.
 * test/unit/extproc/request-decoder.test.ts holds the two equal.
 */
import type { ProcessingRequestIn } from './wire';

/** envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode, by number. */
const BODY_SEND_MODES = ['NONE', 'STREAMED', 'BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED', 'GRPC'] as const;

const REQUEST_MEMBERS = [
  '',
  '',
  'request_headers',
  'response_headers',
  'request_body',
  'response_body',
  'request_trailers',
  'response_trailers',
] as const;

/** Thrown inside the fast path only: the message is handed to the reference decoder. */
class NotFast {}
const NOT_FAST = new NotFast();

/** A cursor over one message; every read is bounds-checked (a bad message leaves the fast path). */
class Cursor {
  constructor(
    readonly buf: Buffer,
    public at: number,
    readonly end: number,
  ) {}

  more(): boolean {
    return this.at < this.end;
  }

  /** A varint of up to 32 bits (5 bytes, the last one < 16); longer ones leave the fast path. */
  varint(): number {
    let v = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (this.at >= this.end) throw NOT_FAST;
      const b = this.buf[this.at++]!;
      if (shift === 28 && b > 0x0f) throw NOT_FAST;
      v += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return v;
    }
    throw NOT_FAST;
  }

  /** A length-delimited field's extent: [start, end). */
  span(): number {
    const len = this.varint();
    const start = this.at;
    if (len > this.end - start) throw NOT_FAST;
    this.at = start + len;
    return start;
  }

  /** The next tag, expecting `wireType` for the field: anything else leaves the fast path. */
  static check(tag: number, wireType: number): void {
    if ((tag & 7) !== wireType) throw NOT_FAST;
  }
}

const LEN = 2;
const VARINT = 0;

export function fastRequestDecoder(reference: (message: Buffer) => ProcessingRequestIn): (message: Buffer) => ProcessingRequestIn {
  return (message: Buffer): ProcessingRequestIn => {
    try {
      return decodeRequest(message);
    } catch (err) {
      if (err !== NOT_FAST) throw err;
      return reference(message);
    }
  };
}

function decodeRequest(buf: Buffer): ProcessingRequestIn {
  const c = new Cursor(buf, 0, buf.length);
  let member = 0;
  let value: object | null = null;
  let observability: boolean | undefined;
  let config: object | null | undefined;
  let metadata: object | undefined;
  while (c.more()) {
    const tag = c.varint();
    const field = Math.floor(tag / 8);
    if (field >= 2 && field <= 7) {
      Cursor.check(tag, LEN);
      if (member !== 0) throw NOT_FAST;
      member = field;
      const start = c.span();
      const inner = new Cursor(buf, start, c.at);
      value = field <= 3 ? headers(inner) : field <= 5 ? body(inner) : trailers(inner);
    } else if (field === 8) {
      // envoy.config.core.v3.Metadata: only the empty one Envoy always sends.
      Cursor.check(tag, LEN);
      if (metadata !== undefined || c.span() !== c.at) throw NOT_FAST;
      metadata = { filter_metadata: {}, typed_filter_metadata: {} };
    } else if (field === 10) {
      Cursor.check(tag, VARINT);
      if (observability !== undefined) throw NOT_FAST;
      observability = c.varint() !== 0;
    } else if (field === 11) {
      Cursor.check(tag, LEN);
      if (config !== undefined) throw NOT_FAST;
      const start = c.span();
      config = protocolConfig(new Cursor(buf, start, c.at));
    } else {
      throw NOT_FAST;
    }
  }
  const out = {
    attributes: {},
    metadata_context: metadata ?? null,
    observability_mode: observability ?? false,
    protocol_config: config ?? null,
  } as Record<string, unknown>;
  if (member !== 0) {
    const name = REQUEST_MEMBERS[member]!;
    out[name] = value;
    out['request'] = name;
  }
  return out as unknown as ProcessingRequestIn;
}

/** HttpHeaders: headers = 1, (attributes = 2: not fast), end_of_stream = 3. */
function headers(c: Cursor): object {
  let map: object | null = null;
  let eos: boolean | undefined;
  while (c.more()) {
    const tag = c.varint();
    if (tag === (1 << 3) + LEN && map === null) {
      const start = c.span();
      map = headerMap(new Cursor(c.buf, start, c.at));
    } else if (tag === (3 << 3) + VARINT && eos === undefined) {
      eos = c.varint() !== 0;
    } else {
      throw NOT_FAST;
    }
  }
  return { attributes: {}, headers: map, end_of_stream: eos ?? false };
}

/** HeaderMap: headers = 1 (repeated HeaderValue: key = 1, value = 2, raw_value = 3). */
function headerMap(c: Cursor): object {
  const list: object[] = [];
  while (c.more()) {
    if (c.varint() !== (1 << 3) + LEN) throw NOT_FAST;
    const start = c.span();
    const v = new Cursor(c.buf, start, c.at);
    let key: string | undefined;
    let value: string | undefined;
    let raw: Buffer | undefined;
    while (v.more()) {
      const tag = v.varint();
      const s = v.span(); // every HeaderValue field is length-delimited
      if (tag === (1 << 3) + LEN && key === undefined) key = v.buf.toString('utf8', s, v.at);
      else if (tag === (2 << 3) + LEN && value === undefined) value = v.buf.toString('utf8', s, v.at);
      else if (tag === (3 << 3) + LEN && raw === undefined) raw = v.buf.subarray(s, v.at);
      else throw NOT_FAST;
    }
    list.push({ key: key ?? '', value: value ?? '', raw_value: raw ?? Buffer.alloc(0) });
  }
  return { headers: list };
}

/** HttpBody: body = 1, end_of_stream = 2, end_of_stream_without_message = 3, grpc_message_compressed = 4. */
function body(c: Cursor): object {
  let data: Buffer | undefined;
  const flags: Array<boolean | undefined> = [undefined, undefined, undefined, undefined, undefined];
  while (c.more()) {
    const tag = c.varint();
    const field = tag >>> 3;
    if (tag === (1 << 3) + LEN && data === undefined) {
      const start = c.span();
      data = c.buf.subarray(start, c.at);
    } else if (field >= 2 && field <= 4 && (tag & 7) === VARINT && flags[field] === undefined) {
      flags[field] = c.varint() !== 0;
    } else {
      throw NOT_FAST;
    }
  }
  return {
    body: data ?? Buffer.alloc(0),
    end_of_stream: flags[2] ?? false,
    end_of_stream_without_message: flags[3] ?? false,
    grpc_message_compressed: flags[4] ?? false,
  };
}

/** HttpTrailers: trailers = 1. */
function trailers(c: Cursor): object {
  let map: object | null = null;
  while (c.more()) {
    if (c.varint() !== (1 << 3) + LEN || map !== null) throw NOT_FAST;
    const start = c.span();
    map = headerMap(new Cursor(c.buf, start, c.at));
  }
  return { trailers: map };
}

/** ProtocolConfiguration: request_body_mode = 1, response_body_mode = 2, send_body_without_waiting_for_header_response = 3. */
function protocolConfig(c: Cursor): object {
  const v: Array<number | undefined> = [undefined, undefined, undefined, undefined];
  while (c.more()) {
    const tag = c.varint();
    const field = tag >>> 3;
    if (field < 1 || field > 3 || (tag & 7) !== VARINT || v[field] !== undefined) throw NOT_FAST;
    v[field] = c.varint();
  }
  return {
    request_body_mode: modeName(v[1] ?? 0),
    response_body_mode: modeName(v[2] ?? 0),
    send_body_without_waiting_for_header_response: (v[3] ?? 0) !== 0,
  };
}

/** An enum value: its name, or the number itself when this proto does not know it (as proto-loader). */
function modeName(n: number): string | number {
  // int32 on the wire: a value >= 2^31 is negative, and negative ones come as 10-byte varints (not fast).
  return BODY_SEND_MODES[n] ?? n | 0;
}
