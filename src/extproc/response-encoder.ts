/**
 * A fast encoder for the `ProcessingResponse` messages this service sends (wire.ts, the `Out`
 * types), for the lean transport.
 *
 * Why: proto-loader's serializer runs protobufjs's `fromObject` (a copy of every message, with
 * enum names looked up) and then its writer, which grows a linked list of operations before it
 * copies them out. That was the largest protocol item left in the service's profile (about 5 µs for
 * a headers answer). Here a first pass sizes every length-delimited part, in the order the second
 * pass writes them, and the second writes the message once into one buffer of that size.
 *
 * It writes exactly the fields wire.ts types, with protobufjs's rule for what to write: a field that
 * is present is written, even at its default value (proto3 readers treat both alike). A message of a
 * kind it does not know goes to the reference serializer; test/unit/extproc/response-encoder.test.ts
 * decodes both encoders' bytes of every answer the service builds and compares them.
 */
import type {
  CommonResponseOut,
  HeaderMutationOut,
  ImmediateResponseOut,
  ProcessingResponseOut,
  StreamedBodyResponseOut,
  StreamedImmediateResponseOut,
  StructOut,
  StructValueOut,
} from './wire';

type Encode = (msg: ProcessingResponseOut) => Uint8Array;

/** HeaderValueOption.HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD */
const OVERWRITE_IF_EXISTS_OR_ADD = 2;

const varintSize = (n: number): number => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5);
/** A length-delimited field of `len` bytes (every tag here is one byte). */
const delimited = (len: number): number => 1 + varintSize(len) + len;

/** UTF-8 length, as Buffer.byteLength counts it (a lone surrogate becomes U+FFFD, 3 bytes). */
function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 2; // the pair's 4 bytes, counted 2 + 2
      i++;
    } else n += 2;
  }
  return n;
}

// ---- pass 1: sizes. Every length-delimited part pushes its length into `z` in writing order. ----
// A part reserves its slot with `open` and fills it with `close` once its content is sized. No
// closure per part: the size pass runs for every answer, and a closure per nested message was about
// half of the encoder's allocation (valueSize alone, 3.4 of 7.3 KB a request).

type Sizes = number[];

/** Reserves the next part's slot; returns its index for {@link close}. */
function open(z: Sizes): number {
  z.push(0);
  return z.length - 1;
}
/** Records the part's content length, and returns the whole field's size. */
function close(z: Sizes, slot: number, len: number): number {
  z[slot] = len;
  return delimited(len);
}
function strSize(z: Sizes, s: string): number {
  const len = utf8Length(s);
  z.push(len);
  return delimited(len);
}
function headerValueSize(z: Sizes, h: { readonly key: string; readonly raw_value: Buffer }): number {
  const slot = open(z);
  return close(z, slot, strSize(z, h.key) + delimited(h.raw_value.length));
}
function mutationSize(z: Sizes, m: HeaderMutationOut): number {
  const slot = open(z);
  let n = 0;
  for (const o of m.set_headers) {
    const option = open(z);
    n += close(z, option, headerValueSize(z, o.header) + (o.append_action !== undefined ? 2 : 0));
  }
  for (const r of m.remove_headers) n += strSize(z, r);
  return close(z, slot, n);
}
function streamedBodySize(z: Sizes, s: StreamedBodyResponseOut): number {
  const slot = open(z);
  return close(z, slot, delimited(s.body.length) + (s.end_of_stream !== undefined ? 2 : 0));
}
function commonSize(z: Sizes, c: CommonResponseOut): number {
  const slot = open(z);
  let n = 0;
  if (c.header_mutation) n += mutationSize(z, c.header_mutation);
  const b = c.body_mutation;
  if (b) {
    const mutation = open(z);
    n += close(z, mutation, 'body' in b ? delimited(b.body.length) : streamedBodySize(z, b.streamed_response));
  }
  if (c.clear_route_cache !== undefined) n += 2;
  return close(z, slot, n);
}
function immediateSize(z: Sizes, i: ImmediateResponseOut): number {
  let n = delimited(1 + varintSize(i.status.code));
  if (i.headers) n += mutationSize(z, i.headers);
  if (i.body !== undefined) n += delimited(i.body.length);
  if (i.details !== undefined) n += strSize(z, i.details);
  return n;
}
function streamedImmediateSize(z: Sizes, s: StreamedImmediateResponseOut): number {
  if ('body_response' in s) return streamedBodySize(z, s.body_response);
  const slot = open(z);
  const map = open(z);
  let n = 0;
  for (const h of s.headers_response.headers.headers) n += headerValueSize(z, h);
  return close(z, slot, close(z, map, n) + 2);
}
function valueSize(z: Sizes, v: StructValueOut): number {
  const slot = open(z);
  if ('nullValue' in v) return close(z, slot, 2);
  if ('numberValue' in v) return close(z, slot, 9);
  if ('stringValue' in v) return close(z, slot, strSize(z, v.stringValue));
  if ('boolValue' in v) return close(z, slot, 2);
  if ('structValue' in v) return close(z, slot, structSize(z, v.structValue));
  const list = open(z);
  let n = 0;
  for (const item of v.listValue.values) n += valueSize(z, item);
  return close(z, slot, close(z, list, n));
}
function structSize(z: Sizes, s: StructOut): number {
  const slot = open(z);
  let n = 0;
  for (const key in s.fields) {
    const entry = open(z);
    n += close(z, entry, strSize(z, key) + valueSize(z, s.fields[key]!));
  }
  return close(z, slot, n);
}

// ---- pass 2: writes, in the same order (tag byte = field number << 3 | wire type) ----

class Out {
  pos = 0;
  next = 0;
  constructor(
    readonly buf: Buffer,
    private readonly z: Sizes,
  ) {}
  byte(b: number): void {
    this.buf[this.pos++] = b;
  }
  varint(n: number): void {
    while (n >= 0x80) {
      this.buf[this.pos++] = (n & 0x7f) | 0x80;
      n = Math.floor(n / 128);
    }
    this.buf[this.pos++] = n;
  }
  /** A sized part's tag and length. */
  open(tag: number): void {
    this.buf[this.pos++] = tag;
    this.varint(this.z[this.next++]!);
  }
  bytes(tag: number, b: Uint8Array): void {
    this.buf[this.pos++] = tag;
    this.varint(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
  str(tag: number, s: string): void {
    const len = this.z[this.next++]!;
    this.buf[this.pos++] = tag;
    this.varint(len);
    if (len === s.length) {
      // ASCII (what header names and metadata keys are): no call into C++ for a few bytes.
      for (let i = 0; i < len; i++) this.buf[this.pos + i] = s.charCodeAt(i);
      this.pos += len;
    } else this.pos += this.buf.write(s, this.pos, len, 'utf8');
  }
  bool(tag: number, v: boolean): void {
    this.buf[this.pos++] = tag;
    this.buf[this.pos++] = v ? 1 : 0;
  }
}

function writeHeaderValue(o: Out, tag: number, h: { readonly key: string; readonly raw_value: Buffer }): void {
  o.open(tag);
  o.str(0x0a, h.key);
  o.bytes(0x1a, h.raw_value);
}
function writeMutation(o: Out, tag: number, m: HeaderMutationOut): void {
  o.open(tag);
  for (const opt of m.set_headers) {
    o.open(0x0a);
    writeHeaderValue(o, 0x0a, opt.header);
    if (opt.append_action !== undefined) {
      o.byte(0x18);
      o.byte(OVERWRITE_IF_EXISTS_OR_ADD);
    }
  }
  for (const r of m.remove_headers) o.str(0x12, r);
}
function writeStreamedBody(o: Out, tag: number, s: StreamedBodyResponseOut): void {
  o.open(tag);
  o.bytes(0x0a, s.body);
  if (s.end_of_stream !== undefined) o.bool(0x10, s.end_of_stream);
}
function writeCommon(o: Out, c: CommonResponseOut): void {
  o.open(0x0a);
  if (c.header_mutation) writeMutation(o, 0x12, c.header_mutation);
  const b = c.body_mutation;
  if (b) {
    o.open(0x1a);
    if ('body' in b) o.bytes(0x0a, b.body);
    else writeStreamedBody(o, 0x1a, b.streamed_response);
  }
  if (c.clear_route_cache !== undefined) o.bool(0x28, c.clear_route_cache);
}
function writeImmediate(o: Out, i: ImmediateResponseOut): void {
  o.byte(0x0a);
  o.byte(1 + varintSize(i.status.code));
  o.byte(0x08);
  o.varint(i.status.code);
  if (i.headers) writeMutation(o, 0x12, i.headers);
  if (i.body !== undefined) o.bytes(0x1a, i.body);
  if (i.details !== undefined) o.str(0x2a, i.details);
}
function writeStreamedImmediate(o: Out, s: StreamedImmediateResponseOut): void {
  if ('body_response' in s) {
    writeStreamedBody(o, 0x12, s.body_response);
    return;
  }
  o.open(0x0a);
  o.open(0x0a);
  for (const h of s.headers_response.headers.headers) writeHeaderValue(o, 0x0a, h);
  o.bool(0x18, s.headers_response.end_of_stream);
}
function writeValue(o: Out, tag: number, v: StructValueOut): void {
  o.open(tag);
  if ('nullValue' in v) {
    o.byte(0x08);
    o.byte(0);
  } else if ('numberValue' in v) {
    o.byte(0x11);
    o.pos = o.buf.writeDoubleLE(v.numberValue, o.pos);
  } else if ('stringValue' in v) o.str(0x1a, v.stringValue);
  else if ('boolValue' in v) o.bool(0x20, v.boolValue);
  else if ('structValue' in v) writeStruct(o, 0x2a, v.structValue);
  else {
    o.open(0x32);
    for (const item of v.listValue.values) writeValue(o, 0x0a, item);
  }
}
function writeStruct(o: Out, tag: number, s: StructOut): void {
  o.open(tag);
  for (const key in s.fields) {
    o.open(0x0a);
    o.str(0x0a, key);
    writeValue(o, 0x12, s.fields[key]!);
  }
}

// ---- the message ----

/** The oneof members it writes, with their field numbers' tag bytes. */
const KINDS: Readonly<Record<string, number>> = {
  request_headers: 0x0a,
  response_headers: 0x12,
  request_body: 0x1a,
  response_body: 0x22,
  request_trailers: 0x2a,
  response_trailers: 0x32,
  immediate_response: 0x3a,
  streamed_immediate_response: 0x5a,
};

type Loose = Record<string, unknown>;

/** The one oneof member set, or undefined for anything this encoder does not write. */
function kindOf(msg: Loose): string | undefined {
  let kind: string | undefined;
  for (const key in msg) {
    if (msg[key] === undefined || key === 'dynamic_metadata') continue;
    if (kind !== undefined || KINDS[key] === undefined) return undefined;
    kind = key;
  }
  return kind;
}

function kindSize(z: Sizes, kind: string, body: unknown): number {
  const slot = open(z);
  return close(z, slot, kindContentSize(z, kind, body));
}
function kindContentSize(z: Sizes, kind: string, body: unknown): number {
  switch (kind) {
    case 'request_trailers':
    case 'response_trailers': {
      const t = body as { readonly header_mutation?: HeaderMutationOut };
      return t.header_mutation ? mutationSize(z, t.header_mutation) : 0;
    }
    case 'immediate_response':
      return immediateSize(z, body as ImmediateResponseOut);
    case 'streamed_immediate_response':
      return streamedImmediateSize(z, body as StreamedImmediateResponseOut);
    default: {
      const r = (body as { readonly response?: CommonResponseOut }).response;
      return r ? commonSize(z, r) : 0;
    }
  }
}

function writeKind(o: Out, kind: string, body: unknown): void {
  o.open(KINDS[kind]!);
  switch (kind) {
    case 'request_trailers':
    case 'response_trailers': {
      const t = body as { readonly header_mutation?: HeaderMutationOut };
      if (t.header_mutation) writeMutation(o, 0x0a, t.header_mutation);
      return;
    }
    case 'immediate_response':
      return writeImmediate(o, body as ImmediateResponseOut);
    case 'streamed_immediate_response':
      return writeStreamedImmediate(o, body as StreamedImmediateResponseOut);
    default: {
      const r = (body as { readonly response?: CommonResponseOut }).response;
      if (r) writeCommon(o, r);
    }
  }
}

/** The fast encoder, with `reference` (proto-loader's serializer) for any other message. */
export function fastResponseEncoder(reference: Encode): Encode {
  return (msg) => {
    const loose = msg as unknown as Loose;
    const kind = kindOf(loose);
    if (kind === undefined) return reference(msg);
    const body = loose[kind];
    const z: Sizes = [];
    let size = kindSize(z, kind, body);
    const meta = msg.dynamic_metadata;
    if (meta) size += structSize(z, meta);
    const out = new Out(Buffer.allocUnsafe(size), z);
    writeKind(out, kind, body);
    if (meta) writeStruct(out, 0x42, meta);
    return out.buf;
  };
}
