/**
 * Per-request timeouts and deadlines for queued modes (with the later upstream
 * revision's one-hour wait maximum).
 */
import { BUILTIN_DEFAULT_SECONDS, type ModeTimeouts, type QueuedMode } from './config';

/** Wait holds are bounded to an hour unless the configured default is longer (later revision). */
export const WAIT_DEFAULT_MAX_SECONDS = 3600;

/**
 * A ceiling for every timeout (365 days). Upstream leaves enqueue unbounded and overflows Go's
 * duration above ~9.2e9 s; any real deadline fits well below this.
 */
export const ABSOLUTE_MAX_SECONDS = 365 * 24 * 3600;

/**
 * The client's `X-Request-Timeout-Seconds`: a base-10 int64 with an optional sign, as Go's
 * `strconv.ParseInt(v, 10, 64)`. `undefined` when absent, malformed, out of range, or <= 0.
 */
export function parseTimeoutHeader(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const m = /^([+-]?)(\d{1,19})$/.exec(raw);
  if (!m) return undefined;
  const n = BigInt(m[2]!);
  if (n > 9223372036854775807n) return undefined; // ParseInt range error: fall back to the default
  if (m[1] === '-' || n === 0n) return undefined;
  return n > BigInt(ABSOLUTE_MAX_SECONDS) ? ABSOLUTE_MAX_SECONDS + 1 : Number(n);
}

/** The timeout, in whole seconds, of a queued request in `mode`. */
export function resolveTimeoutSeconds(mode: QueuedMode, cfg: ModeTimeouts, header: string | undefined): number {
  let secs = cfg.defaultSeconds > 0 ? cfg.defaultSeconds : BUILTIN_DEFAULT_SECONDS[mode];
  const fromHeader = parseTimeoutHeader(header);
  if (fromHeader !== undefined) secs = fromHeader;
  let max = cfg.maxSeconds;
  if (max <= 0 && mode === 'wait') max = Math.max(WAIT_DEFAULT_MAX_SECONDS, cfg.defaultSeconds);
  if (max > 0 && secs > max) secs = max;
  return Math.min(secs, ABSOLUTE_MAX_SECONDS);
}

export interface Deadline {
  /** Unix seconds, integers (the envelope's `created`/`deadline`, the ZSET score). */
  readonly created: number;
  readonly deadline: number;
  /** The `request-active` TTL: ms until the deadline, at least 1 (go-redis rounds sub-ms up). */
  readonly ttlMs: number;
}

/** `created = floor(now)`, `deadline = floor(now + timeout)`; `null` if the deadline has already passed. */
export function computeDeadline(nowMs: number, timeoutSeconds: number): Deadline | null {
  const created = Math.floor(nowMs / 1000);
  const deadline = Math.floor(nowMs / 1000 + timeoutSeconds);
  const ttlMs = deadline * 1000 - nowMs;
  if (ttlMs <= 0) return null;
  return { created, deadline, ttlMs: Math.max(1, Math.floor(ttlMs)) };
}
