/**
 * The client body, parsed once, with its big string values left as the client's bytes.
 *
 * A tokens-in request carries one preprocessed image as a ~20 MB base64 string that no step reads:
 * it only has to reach prefill and decode unchanged. Decoding it into a JS string, then encoding it
 * again for every outbound body, was most of what a large request cost (time and memory). So the
 * parser swaps each big string for a short placeholder before `JSON.parse`, and {@link BodyCodec}
 * splices the original bytes back (subarrays of the client's buffers, never copied) wherever a
 * placeholder is serialised. The body may arrive as the chunks Envoy streamed: they are not
 * concatenated either.
 *
 * Placeholders are `\u0000epd:<nonce>:<n>`. The nonce is 128 random bits drawn per request after
 * its body arrived, so no client can send a string that is taken for one. A placeholder that a step
 * turned into something else (a substring, a concatenation) is found by its nonce and refused, so
 * no placeholder text ever leaves the service.
 */
import { isAscii, isUtf8 } from 'node:buffer';
import { randomBytes } from 'node:crypto';
import { BadRequestError } from './errors';

/** A parsed JSON object (the client body, or any object inside it). */
export type JsonObject = { [key: string]: unknown };

/** Strings at least this long (content bytes) are kept raw; shorter ones cost little to re-encode. */
export const RAW_STRING_MIN_BYTES = 32 * 1024;

/** Turns parsed values back into bytes, and placeholders back into what the client sent. */
export interface BodyCodec {
  /**
   * `JSON.stringify(value)` as bytes, with every placeholder replaced by the client's original
   * string token. The big parts are subarrays of the client's buffers. Throws
   * {@link PlaceholderLeakError} when a placeholder was altered instead of carried whole.
   */
  serialize(value: unknown): Buffer[];
  /** The real content of a string taken from the body: a placeholder is decoded once, then cached. */
  text(s: string): string;
  /**
   * `text(s).slice(0, maxChars)`, without decoding the rest of a big string (a `data:` URL's
   * header, say).
   */
  textHead(s: string, maxChars: number): string;
}

export interface ParsedJsonBody {
  readonly body: JsonObject;
  readonly codec: BodyCodec;
}

/** A placeholder reached {@link BodyCodec.serialize} in a form it cannot splice: a bug in a step. */
export class PlaceholderLeakError extends Error {
  override readonly name = 'PlaceholderLeakError';
  constructor() {
    super('internal: a large body string was altered by a step and cannot be serialised');
  }
}

/** Total bytes of a body in parts. */
export function byteLengthOf(parts: readonly Buffer[]): number {
  let n = 0;
  for (const p of parts) n += p.length;
  return n;
}

/** One buffer of a body in parts: the part itself when there is one, else one copy. */
export function concatParts(parts: readonly Buffer[]): Buffer {
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts as Buffer[], byteLengthOf(parts));
}

function serializeToBuffer(value: unknown): Buffer {
  const json = JSON.stringify(value);
  if (json === undefined) throw new TypeError('body is not JSON-serialisable');
  return Buffer.from(json, 'utf8');
}

/** For bodies without big strings (and bodies built by hand, as in tests): plain JSON. */
export const PLAIN_BODY_CODEC: BodyCodec = {
  serialize: (value) => [serializeToBuffer(value)],
  text: (s) => s,
  textHead: (s, maxChars) => (s.length <= maxChars ? s : s.slice(0, maxChars)),
};

function asObject(parsed: unknown): JsonObject {
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new BadRequestError('invalid JSON body');
  return parsed as JsonObject;
}

/** Anything but a JSON object is a 400, as upstream; the message never echoes the body. */
function parsePlain(raw: Rope): JsonObject {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString(0, raw.length));
  } catch {
    throw new BadRequestError('invalid JSON body');
  }
  return asObject(parsed);
}

/**
 * Parses a client body once: one buffer, or the chunks it arrived in (in order). Throws
 * {@link BadRequestError} `invalid JSON body` for anything `JSON.parse` refuses and for a value
 * that is not an object, exactly as a plain parse of the whole body would.
 */
export function parseJsonBody(raw: Buffer | readonly Buffer[], minRawBytes: number = RAW_STRING_MIN_BYTES): ParsedJsonBody {
  const rope = new Rope(Buffer.isBuffer(raw) ? [raw] : raw);
  if (rope.length > minRawBytes) {
    const strings = findRawStrings(rope, Math.max(1, minRawBytes));
    if (strings.length > 0) {
      const parsed = parseSkeleton(rope, strings);
      if (parsed) return parsed;
    }
  }
  return { body: parsePlain(rope), codec: PLAIN_BODY_CODEC };
}

// ---- the body as a list of chunks ----

/** Read access across the chunks of a body, by offset into the whole. */
class Rope {
  readonly length: number;
  private readonly chunks: Buffer[] = [];
  /** Offset of each chunk in the whole. */
  private readonly starts: number[] = [];

  constructor(chunks: readonly Buffer[]) {
    let n = 0;
    for (const c of chunks) {
      if (c.length === 0) continue;
      this.chunks.push(c);
      this.starts.push(n);
      n += c.length;
    }
    this.length = n;
  }

  /** Index of the chunk holding offset `at` (0 <= at < length). */
  private chunkAt(at: number): number {
    const starts = this.starts;
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (starts[mid]! <= at) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  byte(at: number): number {
    const c = this.chunkAt(at);
    return this.chunks[c]![at - this.starts[c]!]!;
  }

  /**
   * Walks from `at` (inclusive) by `step` (+1 or -1) while `test` holds, at most `limit` bytes;
   * returns how many bytes held. Reads chunks directly: long runs cost no lookup per byte.
   */
  run(at: number, step: 1 | -1, test: (b: number) => boolean, limit: number): number {
    if (at < 0 || at >= this.length) return 0;
    let n = 0;
    let c = this.chunkAt(at);
    let i = at - this.starts[c]!;
    while (n < limit) {
      const chunk = this.chunks[c]!;
      if (i < 0 || i >= chunk.length) {
        c += step;
        if (c < 0 || c >= this.chunks.length) return n;
        i = step > 0 ? 0 : this.chunks[c]!.length - 1;
        continue;
      }
      if (!test(chunk[i]!)) return n;
      n++;
      i += step;
    }
    return n;
  }

  /** First `value` at or after `from`, or -1. */
  indexOf(value: number, from: number): number {
    if (from >= this.length) return -1;
    for (let c = this.chunkAt(from); c < this.chunks.length; c++) {
      const start = this.starts[c]!;
      const i = this.chunks[c]!.indexOf(value, Math.max(0, from - start));
      if (i >= 0) return start + i;
    }
    return -1;
  }

  /** Last `value` in `[floor, from]`, or -1. */
  lastIndexOf(value: number, from: number, floor: number): number {
    for (let c = this.chunkAt(from); c >= 0; c--) {
      const start = this.starts[c]!;
      if (start + this.chunks[c]!.length <= floor) break;
      const i = this.chunks[c]!.lastIndexOf(value, Math.min(from - start, this.chunks[c]!.length - 1));
      if (i >= 0) return start + i >= floor ? start + i : -1;
      if (start <= floor) break;
    }
    return -1;
  }

  /** Subarrays covering `[from, to)`, in order. */
  pieces(from: number, to: number): Buffer[] {
    const out: Buffer[] = [];
    if (from >= to) return out;
    for (let c = this.chunkAt(from); c < this.chunks.length; c++) {
      const start = this.starts[c]!;
      if (start >= to) break;
      const chunk = this.chunks[c]!;
      out.push(chunk.subarray(Math.max(0, from - start), Math.min(chunk.length, to - start)));
    }
    return out;
  }

  /** `[from, to)` decoded as UTF-8 (a character split between chunks decodes whole). */
  toString(from: number, to: number): string {
    const pieces = this.pieces(from, to);
    if (pieces.length === 0) return '';
    return pieces.length === 1 ? pieces[0]!.toString('utf8') : Buffer.concat(pieces, to - from).toString('utf8');
  }
}

// ---- finding big strings ----

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const CONTROL_LIMIT = 0x20202020;
const HIGH_BITS = 0x80808080;

/** Whitespace between a big string and its neighbours is looked at up to this far; pretty-printing needs far less. */
const MAX_WHITESPACE_RUN = 4096;

function isWhitespace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

function isBackslash(b: number): boolean {
  return b === BACKSLASH;
}

/** Backslash runs are counted up to this far; a longer one stops the search for big strings. */
const MAX_BACKSLASH_RUN = 4096;

/** Whether the quote at `at` is escaped (an odd run of backslashes before it); `null` past the limit. */
function escapedInRope(raw: Rope, at: number): boolean | null {
  const n = raw.run(at - 1, -1, isBackslash, MAX_BACKSLASH_RUN);
  return n >= MAX_BACKSLASH_RUN ? null : (n & 1) === 1;
}

function escapedInBuffer(buf: Buffer, at: number): boolean {
  let n = 0;
  for (let i = at - 1; i >= 0 && buf[i] === BACKSLASH; i--) n++;
  return (n & 1) === 1;
}

/** Whether any byte is below 0x20 (JSON forbids them raw in strings); four bytes per step. */
function hasControlByte(b: Buffer): boolean {
  const n = b.length;
  let i = 0;
  const lead = Math.min(n, (4 - (b.byteOffset & 3)) & 3);
  for (; i < lead; i++) if (b[i]! < 0x20) return true;
  const count = (n - i) >>> 2;
  if (count > 0) {
    const w = new Uint32Array(b.buffer, b.byteOffset + i, count);
    // Per word, (x - 0x20202020) & ~x has a byte's high bit set only if some byte is < 0x20
    // (the classic "has a byte less than n" test); OR-ing the words keeps the answer exact.
    let acc = 0;
    let j = 0;
    for (; j + 4 <= count; j += 4) {
      const a = w[j]!;
      const c = w[j + 1]!;
      const d = w[j + 2]!;
      const e = w[j + 3]!;
      acc |= ((a - CONTROL_LIMIT) & ~a) | ((c - CONTROL_LIMIT) & ~c) | ((d - CONTROL_LIMIT) & ~d) | ((e - CONTROL_LIMIT) & ~e);
    }
    for (; j < count; j++) {
      const x = w[j]!;
      acc |= (x - CONTROL_LIMIT) & ~x;
    }
    if ((acc & HIGH_BITS) !== 0) return true;
    i += count * 4;
  }
  for (; i < n; i++) if (b[i]! < 0x20) return true;
  return false;
}

/**
 * The string token `[open, close]` (quotes included) as the pieces to splice back, when it looks
 * like a value string whose content may stay raw: a value position on both sides (never an object
 * key), and content that JSON.parse takes as is (no escapes, no raw control bytes) and that
 * decodes exactly (valid UTF-8). `null` otherwise.
 */
function rawToken(raw: Rope, open: number, close: number): Buffer[] | null {
  // A run of whitespace at the limit is not judged: the string is then parsed plainly.
  const spaceBefore = raw.run(open - 1, -1, isWhitespace, MAX_WHITESPACE_RUN);
  const before = open - 1 - spaceBefore;
  if (spaceBefore >= MAX_WHITESPACE_RUN || before < 0) return null;
  const b = raw.byte(before);
  if (b !== 0x3a /* : */ && b !== 0x2c /* , */ && b !== 0x5b /* [ */) return null;
  const spaceAfter = raw.run(close + 1, 1, isWhitespace, MAX_WHITESPACE_RUN);
  const after = close + 1 + spaceAfter;
  if (spaceAfter >= MAX_WHITESPACE_RUN || after >= raw.length) return null;
  const a = raw.byte(after);
  if (a !== 0x2c /* , */ && a !== 0x5d /* ] */ && a !== 0x7d /* } */) return null;
  const pieces = raw.pieces(open, close + 1);
  let ascii = true;
  for (let i = 0; i < pieces.length; i++) {
    // The quotes at either end pass every check.
    const p = pieces[i]!;
    if (p.indexOf(BACKSLASH) >= 0 || hasControlByte(p)) return null;
    if (ascii && !isAscii(p)) ascii = false;
  }
  if (ascii) return pieces;
  // UTF-8 is validated whole: a character may straddle two chunks. Rare enough to pay one copy.
  const whole = concatParts(pieces);
  return isUtf8(whole) ? [whole] : null;
}

interface RawString {
  readonly open: number;
  readonly close: number;
  /** The token, quotes included, as subarrays of the body. */
  readonly token: readonly Buffer[];
}

/**
 * The big strings to keep raw, in body order.
 *
 * Looks only for runs of at least `min` bytes without a quote, jumping `min` bytes at a time
 * (the last quote of each window is found with one backward search), so a body of many small
 * strings costs O(length / min) calls, not one per string. Whether a run really is a string (and
 * not the gap between two, such as a long token-id array) is judged locally here; the skeleton
 * parse then proves it (see {@link parseSkeleton}).
 */
function findRawStrings(raw: Rope, min: number): RawString[] {
  const found: RawString[] = [];
  const n = raw.length;
  let pos = 0;
  while (pos + min < n) {
    const q = raw.lastIndexOf(QUOTE, pos + min - 1, pos);
    if (q >= 0) {
      pos = q + 1;
      continue;
    }
    // No quote in [pos, pos + min): a run of at least `min` bytes starts at pos.
    let close = raw.indexOf(QUOTE, pos + min);
    let escaped = close >= 0 ? escapedInRope(raw, close) : false;
    while (escaped === true) {
      close = raw.indexOf(QUOTE, close + 1);
      escaped = close >= 0 ? escapedInRope(raw, close) : false;
    }
    // Past the limit the string's end is unknown, and so is everything after it: stop looking.
    if (close < 0 || escaped === null) break;
    const open = pos - 1;
    if (open >= 0 && escapedInRope(raw, open) === false) {
      const token = rawToken(raw, open, close);
      if (token) found.push({ open, close, token });
    }
    pos = close + 1;
  }
  return found;
}

// ---- the skeleton ----

const TAG = '\u0000epd:';
/** The tag as JSON text (`\u0000` escaped), how it appears in a skeleton and in JSON.stringify output. */
const TAG_JSON = '\\u0000epd:';
const NONCE_HEX_CHARS = 32;
/**
 * Serialised output is searched for this much of the nonce (64 bits: a client's text never matches
 * it by chance), so a placeholder that lost its start or end is still caught.
 */
const NONCE_PROBE_CHARS = 16;

/**
 * Parses the body with each big string's content replaced by a placeholder. `null` when that
 * skeleton is not valid JSON; the caller then parses the whole body plainly, which decides between
 * success and a 400 exactly as before.
 *
 * Why a valid skeleton proves the strings right: a placeholder starts with a backslash, which JSON
 * allows only inside strings, and it sits right after an unescaped quote and right before a quote,
 * with no quote inside it; so in a skeleton JSON.parse accepts, every placeholder is a whole string
 * token, in value position (rawToken saw no `:` after it). Each string's content is itself a valid
 * string body (no backslash, no control byte), so swapping the client's bytes back in yields the
 * client's body, which therefore parses too, to the same value with those strings in place.
 */
function parseSkeleton(raw: Rope, strings: readonly RawString[]): ParsedJsonBody | null {
  const nonce = randomBytes(NONCE_HEX_CHARS / 2).toString('hex');
  const pieces: string[] = [];
  let from = 0;
  for (let i = 0; i < strings.length; i++) {
    // Cuts fall on quote bytes, so decoding piece by piece equals decoding the whole.
    pieces.push(raw.toString(from, strings[i]!.open + 1), TAG_JSON, nonce, ':', String(i));
    from = strings[i]!.close;
  }
  pieces.push(raw.toString(from, raw.length));
  let parsed: unknown;
  try {
    parsed = JSON.parse(pieces.join(''));
  } catch {
    return null;
  }
  return { body: asObject(parsed), codec: new SplicingCodec(strings, nonce) };
}

class SplicingCodec implements BodyCodec {
  private readonly prefix: string;
  private readonly nonceBytes: Buffer;
  private readonly probe: Buffer;
  private readonly decoded: Array<string | undefined>;

  constructor(
    private readonly strings: readonly RawString[],
    nonce: string,
  ) {
    this.prefix = `${TAG}${nonce}:`;
    this.nonceBytes = Buffer.from(nonce, 'latin1');
    this.probe = this.nonceBytes.subarray(0, NONCE_PROBE_CHARS);
    this.decoded = new Array<string | undefined>(strings.length);
  }

  /** The string's index when it is one of this codec's placeholders, else -1. */
  private indexOf(s: string): number {
    const p = this.prefix;
    if (s.length <= p.length || s.length > p.length + 6 || s.charCodeAt(0) !== 0 || !s.startsWith(p)) return -1;
    let n = 0;
    for (let i = p.length; i < s.length; i++) {
      const d = s.charCodeAt(i) - 0x30;
      if (d < 0 || d > 9) return -1;
      n = n * 10 + d;
    }
    return n < this.strings.length && String(n) === s.slice(p.length) ? n : -1;
  }

  /** The content of string `i` (quotes dropped) as pieces. */
  private content(i: number): Buffer[] {
    const token = this.strings[i]!.token;
    const out = token.slice();
    out[0] = out[0]!.subarray(1);
    out[out.length - 1] = out[out.length - 1]!.subarray(0, out[out.length - 1]!.length - 1);
    return out;
  }

  text(s: string): string {
    const i = this.indexOf(s);
    if (i < 0) return s;
    return (this.decoded[i] ??= concatParts(this.content(i)).toString('utf8'));
  }

  textHead(s: string, maxChars: number): string {
    const i = this.indexOf(s);
    if (i < 0) return s.length <= maxChars ? s : s.slice(0, maxChars);
    const cached = this.decoded[i];
    if (cached !== undefined) return cached.slice(0, maxChars);
    // A UTF-16 unit needs at most 3 UTF-8 bytes: decode that much, never the whole string. Up to
    // 3 bytes more show whether the cut splits a character; it then backs off to its start.
    const want = 3 * Math.max(0, maxChars);
    const head: Buffer[] = [];
    let have = 0;
    for (const p of this.content(i)) {
      if (have >= want + 3) break;
      const take = p.subarray(0, want + 3 - have);
      head.push(take);
      have += take.length;
    }
    let bytes = concatParts(head);
    let cut = Math.min(want, bytes.length);
    while (cut > 0 && cut < bytes.length && (bytes[cut]! & 0xc0) === 0x80) cut--;
    bytes = bytes.subarray(0, cut);
    return bytes.toString('utf8').slice(0, maxChars);
  }

  serialize(value: unknown): Buffer[] {
    const out = serializeToBuffer(value);
    const nonce = this.nonceBytes;
    const parts: Buffer[] = [];
    let from = 0;
    // Every occurrence of the nonce must be a whole placeholder token: `"\u0000epd:<nonce>:<n>"`.
    for (let at = out.indexOf(this.probe); at >= 0; at = out.indexOf(this.probe, at + nonce.length)) {
      const open = at - TAG_JSON.length - 1;
      if (
        open < from ||
        out[open] !== QUOTE ||
        escapedInBuffer(out, open) ||
        out.toString('latin1', open + 1, at) !== TAG_JSON ||
        !out.subarray(at, at + nonce.length).equals(nonce)
      ) {
        throw new PlaceholderLeakError();
      }
      let k = at + nonce.length;
      if (out[k] !== 0x3a /* : */) throw new PlaceholderLeakError();
      const digits = ++k;
      let n = 0;
      while (k < out.length && k - digits < 6 && out[k]! >= 0x30 && out[k]! <= 0x39) n = n * 10 + (out[k++]! - 0x30);
      if (k === digits || out[k] !== QUOTE || (out[digits] === 0x30 && k - digits > 1) || n >= this.strings.length) {
        throw new PlaceholderLeakError();
      }
      if (open > from) parts.push(out.subarray(from, open));
      for (const piece of this.strings[n]!.token) parts.push(piece);
      from = k + 1;
    }
    if (parts.length === 0) return [out];
    if (from < out.length) parts.push(out.subarray(from));
    return parts;
  }
}
