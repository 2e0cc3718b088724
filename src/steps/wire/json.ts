import type { JsonObject } from '../../pipeline/context';

/** A JSON object (not an array, not null): what Go's `map[string]any` assertion accepts. */
export function isJsonObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A JSON type name for error messages; never echoes the value itself. */
export function jsonTypeName(v: unknown): string {
  if (v === undefined || v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

const WHITESPACE = new Set([0x20, 0x09, 0x0a, 0x0d]);
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/** Index just past the string that opens at `start` (a `"`), or -1 if it never closes. */
function endOfString(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c) i++;
    else if (c === 0x22) return i + 1;
  }
  return -1;
}

/** Index just past the object or array that opens at `start`, or -1 if it never closes. */
function endOfContainer(text: string, start: number): number {
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const end = endOfString(text, i);
      if (end < 0) return -1;
      i = end - 1;
    } else if (c === 0x7b || c === 0x5b) {
      depth++;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

/** Where the first JSON value of `text` ends, or -1 when there is none to find. */
function endOfFirstValue(text: string, start: number): number {
  const c = text.charCodeAt(start);
  if (c === 0x7b || c === 0x5b) return endOfContainer(text, start);
  if (c === 0x22) return endOfString(text, start);
  for (const literal of ['true', 'false', 'null']) {
    if (text.startsWith(literal, start)) return start + literal.length;
  }
  NUMBER.lastIndex = start;
  return NUMBER.test(text) ? NUMBER.lastIndex : -1;
}

/**
 * Decodes the first JSON value of a response body, ignoring whatever follows it, as Go's
 * `json.NewDecoder(r).Decode(&v)` does for the upstream render and prefill responses. The whole
 * body is tried first, so the usual well-formed answer costs one `JSON.parse`.
 */
export function decodeFirstJsonValue(body: Buffer | string): unknown {
  const text = typeof body === 'string' ? body : body.toString('utf8');
  try {
    return JSON.parse(text);
  } catch (err) {
    let start = 0;
    while (start < text.length && WHITESPACE.has(text.charCodeAt(start))) start++;
    const end = start < text.length ? endOfFirstValue(text, start) : -1;
    // A body that is one (broken) value has nothing after it to drop: report the real error.
    if (end < 0 || end >= text.length) throw err;
    return JSON.parse(text.slice(start, end));
  }
}

/** Total bytes of a serialised body's parts. */
export function byteLength(parts: readonly Buffer[]): number {
  let n = 0;
  for (const p of parts) n += p.length;
  return n;
}
