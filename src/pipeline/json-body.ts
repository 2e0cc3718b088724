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
import { randomBytes } from 'node:crypto';
import { BadRequestError } from './errors';
import { concatParts, escapedInBuffer, findRawStrings, QUOTE, Rope, type RawString } from './raw-strings';

export { byteLengthOf, concatParts } from './raw-strings';

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
