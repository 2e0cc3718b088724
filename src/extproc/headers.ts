/**
 * Header decoding (Envoy -> RequestHead) and encoding (Decision headers -> HeaderValueOption).
 *
 * Every header is hostile: names and values that Envoy would reject in a mutation are dropped
 * here, because one invalid entry makes Envoy fail the whole request with a 500.
 */
import type { RequestHead } from '../pipeline/decision';
import type { HeaderMapIn, HeaderMutationOut, HeaderValueOptionOut } from './wire';

/** Envoy's default header-count limit is 100; anything far beyond it is not a real request. */
export const MAX_DECODED_HEADERS = 1024;

/**
 * Bytes -> string as latin1, like Node's HTTP stack: lossless for any byte, so a value we read and
 * hand back is byte-identical.
 */
function headerValueOf(entry: { value: string; raw_value: Buffer }): string {
  // Envoy >= 1.32 sends raw_value only; older ones (runtime flag off) send value.
  if (entry.raw_value && entry.raw_value.length > 0) return entry.raw_value.toString('latin1');
  return typeof entry.value === 'string' ? entry.value : '';
}

/**
 * Request headers as the pipeline sees them: lower-case names, first value of each name wins,
 * pseudo-headers out of `headers` (`:method` and `:path` go to their own fields). `origin` is the
 * stream's trusted entry (origin.ts), passed through.
 */
export function decodeRequestHead(map: HeaderMapIn | null | undefined, origin?: string): RequestHead {
  const headers: Record<string, string> = {};
  let method = '';
  let path = '';
  let seenMethod = false;
  let seenPath = false;
  let later: Record<string, string[]> | undefined;
  const entries = map?.headers ?? [];
  const n = Math.min(entries.length, MAX_DECODED_HEADERS);
  for (let i = 0; i < n; i++) {
    const entry = entries[i]!;
    if (typeof entry.key !== 'string' || entry.key.length === 0) continue;
    const key = entry.key.toLowerCase();
    if (key.charCodeAt(0) === 58 /* ':' */) {
      if (key === ':method' && !seenMethod) {
        method = headerValueOf(entry);
        seenMethod = true;
      } else if (key === ':path' && !seenPath) {
        path = headerValueOf(entry);
        seenPath = true;
      }
      continue;
    }
    // `__proto__` would replace the record's prototype instead of becoming a header.
    if (key === '__proto__') continue;
    if (Object.prototype.hasOwnProperty.call(headers, key)) {
      // A repeated name: the first value is the one read, but Envoy forwards them all, so the
      // pipeline gets the others too (its header policy judges every value that may pass on).
      // No prototype: a header named `constructor` or `toString` is a name like any other.
      later ??= Object.create(null) as Record<string, string[]>;
      (later[key] ??= []).push(headerValueOf(entry));
      continue;
    }
    headers[key] = headerValueOf(entry);
  }
  const head: { method: string; path: string; headers: Record<string, string>; origin?: string; laterValues?: Record<string, string[]> } = {
    method,
    path,
    headers,
  };
  if (origin !== undefined) head.origin = origin;
  if (later) head.laterValues = later;
  return head;
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;
// Control characters other than HTAB, and DEL, are invalid in a field value (RFC 9110 5.5).
const INVALID_VALUE_CHAR = /[\x00-\x08\x0a-\x1f\x7f]/;
const LATIN1_ONLY = /^[\x00-\xff]*$/;

/** Lower-case name, optionally a pseudo-header (`:path` may be rewritten through ext_proc). */
export function isValidHeaderName(name: string): boolean {
  return name.charCodeAt(0) === 58 ? TOKEN.test(name.slice(1)) : TOKEN.test(name);
}

export function isValidHeaderValue(value: string): boolean {
  return !INVALID_VALUE_CHAR.test(value);
}

function encodeValue(value: string): Buffer {
  return Buffer.from(value, LATIN1_ONLY.test(value) ? 'latin1' : 'utf8');
}

/** What {@link buildHeaderMutation} drops and why, so the caller can log it once. */
export interface DroppedHeaders {
  invalid: string[];
}

export interface HeaderMutationInput {
  readonly set: Readonly<Record<string, string>>;
  readonly remove?: readonly string[];
  /** Names (lower-case) never taken from `set` (`extraSet` still may set them). */
  readonly skip?: ReadonlySet<string>;
  /** Extra entries set after `set` (e.g. our own content-length). */
  readonly extraSet?: Readonly<Record<string, string>>;
  /** Extra names removed (deduplicated with `remove`). */
  readonly extraRemove?: readonly string[];
}

/**
 * Names seen before -> their lower-case form, or null when that is not a valid name. Why: a forward
 * decision sets and removes the same dozen names on every request (ours and the connectors'), and
 * lower-casing each and testing it against the token pattern was a large part of building the
 * mutation (with the trim below: 1.9 -> 1.1 µs for a forward decision, microbenchmark).
 * Bounded: past MAX_KNOWN_NAMES a new name is checked each time, as before.
 */
const KNOWN_NAMES = new Map<string, string | null>();
const MAX_KNOWN_NAMES = 256;

function checkedName(rawName: string): string | null {
  const known = KNOWN_NAMES.get(rawName);
  if (known !== undefined) return known;
  const name = rawName.toLowerCase();
  const checked = isValidHeaderName(name) ? name : null;
  if (KNOWN_NAMES.size < MAX_KNOWN_NAMES) KNOWN_NAMES.set(rawName, checked);
  return checked;
}

/** Optional whitespace around a field value goes (RFC 9110 5.5); most values have none. */
function trimmedValue(value: string): string {
  const n = value.length;
  if (n === 0) return value;
  const first = value.charCodeAt(0);
  const last = value.charCodeAt(n - 1);
  if (first !== 0x20 && first !== 0x09 && last !== 0x20 && last !== 0x09) return value;
  return value.replace(/^[ \t]+|[ \t]+$/g, '');
}

/** Builds a HeaderMutation: values in raw_value, overwrite semantics, invalid entries dropped. */
export function buildHeaderMutation(input: HeaderMutationInput, dropped?: DroppedHeaders): HeaderMutationOut {
  const set_headers: HeaderValueOptionOut[] = [];
  const setNames = new Set<string>();
  const addSet = (rawName: string, rawValue: string, ours: boolean): void => {
    const name = checkedName(rawName);
    const value = typeof rawValue === 'string' ? trimmedValue(rawValue) : '';
    if (name === null) {
      dropped?.invalid.push(rawName.toLowerCase());
      return;
    }
    if ((!ours && input.skip?.has(name)) || setNames.has(name)) return;
    if (!isValidHeaderValue(value)) {
      dropped?.invalid.push(name);
      return;
    }
    setNames.add(name);
    set_headers.push({ header: { key: name, raw_value: encodeValue(value) }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' });
  };
  // extraSet first so our own values (content-length) win over the decision's.
  if (input.extraSet) for (const k of Object.keys(input.extraSet)) addSet(k, input.extraSet[k]!, true);
  for (const k of Object.keys(input.set)) addSet(k, input.set[k]!, false);

  const remove_headers: string[] = [];
  const removeNames = new Set<string>();
  const addRemove = (rawName: string): void => {
    if (typeof rawName !== 'string') return;
    const name = checkedName(rawName);
    if (name === null) {
      dropped?.invalid.push(rawName.toLowerCase());
      return;
    }
    if (removeNames.has(name) || setNames.has(name)) return;
    removeNames.add(name);
    remove_headers.push(name);
  };
  for (const k of input.remove ?? []) addRemove(k);
  for (const k of input.extraRemove ?? []) addRemove(k);
  return { set_headers, remove_headers };
}
