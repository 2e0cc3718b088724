/**
 * The one part of a worker's error body a client may see: when render, encode or prefill refuse
 * the client's own input (a 4xx), the `message` string of their JSON error, sanitised. Everything
 * else of the body, and every 5xx body, stays in the logs.
 */

/** At most this many characters (code points) of a worker's message are shown. */
export const UPSTREAM_MESSAGE_MAX_CHARS = 512;

/**
 * Control and format characters (C0, DEL, C1, bidi overrides, zero-width), unpaired surrogates,
 * private-use and unassigned code points, and line or paragraph separators: nothing that could
 * reshape a log line or a terminal, or that is not printable text.
 */
const UNPRINTABLE = /[\p{C}\p{Zl}\p{Zp}]/gu;

/**
 * The message a worker's JSON error body carries, as vLLM and llm-d-inference-sim answer
 * (`{"error": {"message": ...}}`), as older vLLM did (`{"message": ...}`), or as FastAPI answers a
 * route it does not serve (`{"detail": "Not Found"}`, a string only: a validation `detail` is a
 * list holding the client's input). Undefined when the body holds none of these.
 */
function messageOf(body: string): string | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return undefined;
  const d = doc as Record<string, unknown>;
  const error = d['error'];
  if (typeof error === 'object' && error !== null && typeof (error as Record<string, unknown>)['message'] === 'string') {
    return (error as Record<string, unknown>)['message'] as string;
  }
  if (typeof d['message'] === 'string') return d['message'];
  if (typeof d['detail'] === 'string') return d['detail'];
  return undefined;
}

/**
 * `s` as one line of printable text: white space (line breaks included) becomes single spaces,
 * everything {@link UNPRINTABLE} goes, and it is cut at {@link UPSTREAM_MESSAGE_MAX_CHARS}.
 */
export function sanitiseUpstreamMessage(s: string): string {
  const printable = s.replace(/\s+/g, ' ').replace(UNPRINTABLE, '').replace(/ {2,}/g, ' ').trim();
  // By code points, so a cut never splits a surrogate pair.
  const chars = Array.from(printable);
  return chars.length > UPSTREAM_MESSAGE_MAX_CHARS ? chars.slice(0, UPSTREAM_MESSAGE_MAX_CHARS).join('').trimEnd() : printable;
}

/** The sanitised message of a worker's 4xx JSON error body, or undefined when there is none to show. */
export function upstreamClientMessage(body: string): string | undefined {
  const raw = messageOf(body);
  if (raw === undefined) return undefined;
  const clean = sanitiseUpstreamMessage(raw);
  return clean === '' ? undefined : clean;
}
