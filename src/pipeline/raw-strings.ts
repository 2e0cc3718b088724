/**
 * Finding the big string values of a JSON body without decoding it: the body as a list of chunks
 * (Rope, never concatenated), and the scan for string tokens long enough to be kept as the
 * client's bytes (json-body.ts explains why). Pure byte work; no JSON.parse.
 */
import { isAscii, isUtf8 } from 'node:buffer';

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

// ---- the body as a list of chunks ----

/** Read access across the chunks of a body, by offset into the whole. */
export class Rope {
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

export const QUOTE = 0x22;
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

export function escapedInBuffer(buf: Buffer, at: number): boolean {
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

export interface RawString {
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
export function findRawStrings(raw: Rope, min: number): RawString[] {
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
