/**
 * Redaction of leg headers and bodies for the debug and trace logs, as upstream redacts them
 * (reference §5.10, `pkg/coordinator/common/httplog/redact.go` and `gateway.RedactBody`): what a
 * log line shows is the structure of a leg, never a credential, an image or a prompt's bulk.
 * Called only when the level is on; nothing here runs on the normal path.
 */

const REDACTED = '[REDACTED]';
/** Longest header value logged verbatim. */
const MAX_HEADER_VALUE = 256;
/** Longest JSON string kept verbatim; longer ones become a marker. */
const MAX_STRING = 50;
/** Longest non-JSON body logged verbatim. */
const MAX_RAW_BODY = 200;
/** Array elements kept before a count marker. */
const MAX_ELEMS = 10;
/** Nesting below which a value becomes `[truncated]`. */
const MAX_DEPTH = 32;

const SENSITIVE_HEADERS: ReadonlySet<string> = new Set([
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-api-key',
  'x-auth-token',
]);

/** Lower-case names; credentials replaced; long values cut with `...[truncated]`. */
export function redactHeaders(headers: Readonly<Record<string, string | readonly string[] | undefined>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, raw] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (SENSITIVE_HEADERS.has(lower)) {
      out[lower] = REDACTED;
      continue;
    }
    const value = Array.isArray(raw) ? (raw[0] ?? '') : ((raw as string | undefined) ?? '');
    out[lower] = value.length > MAX_HEADER_VALUE ? `${value.slice(0, MAX_HEADER_VALUE)}...[truncated]` : value;
  }
  return out;
}

function redactValue(v: unknown, depth: number): unknown {
  if (depth >= MAX_DEPTH) return '[truncated]';
  if (typeof v === 'string') {
    if (v.length <= MAX_STRING) return v;
    if (v.startsWith('data:')) return '[base64]';
    if (v.startsWith('http://') || v.startsWith('https://')) return '[url]';
    return '...';
  }
  if (Array.isArray(v)) {
    const n = Math.min(v.length, MAX_ELEMS);
    const out: unknown[] = new Array(n);
    for (let i = 0; i < n; i++) out[i] = redactValue(v[i], depth + 1);
    if (v.length > MAX_ELEMS) out.push(`... +${v.length - MAX_ELEMS} more`);
    return out;
  }
  if (typeof v === 'object' && v !== null) {
    const out: Record<string, unknown> = {};
    for (const [k, item] of Object.entries(v)) out[k] = redactValue(item, depth + 1);
    return out;
  }
  return v;
}

/** A body as bytes (one buffer or parts): parsed JSON with strings redacted, else the text cut at 200 chars. */
export function redactBody(body: Buffer | readonly Buffer[] | string): unknown {
  const text =
    typeof body === 'string' ? body : Buffer.isBuffer(body) ? body.toString('utf8') : Buffer.concat(body as Buffer[]).toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return text.length > MAX_RAW_BODY ? `${text.slice(0, MAX_RAW_BODY)}...` : text;
  }
  return redactValue(parsed, 0);
}
