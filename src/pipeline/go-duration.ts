/**
 * A duration in ms as Go's `time.Duration.String()` prints it (`850µs`, `1.234567ms`, `2.5s`,
 * `1m30s`), for log lines that match upstream's (`pipeline step timings`).
 */
function trim(n: number, decimals: number): string {
  // `toFixed(d).replace(/\.?0+$/, '')` without the regex: this runs for every step of every request.
  const s = n.toFixed(decimals);
  let end = s.length;
  while (s.charCodeAt(end - 1) === 0x30) end--;
  if (s.charCodeAt(end - 1) === 0x2e) end--;
  return end === s.length ? s : s.slice(0, end);
}

export function goDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms <= 0) return '0s';
  const ns = Math.round(ms * 1e6);
  if (ns < 1_000) return `${ns}ns`;
  if (ns < 1_000_000) return `${trim(ns / 1_000, 3)}µs`;
  if (ns < 1_000_000_000) return `${trim(ns / 1_000_000, 6)}ms`;
  const totalSeconds = ns / 1e9;
  if (totalSeconds < 60) return `${trim(totalSeconds, 9)}s`;
  const h = Math.floor(totalSeconds / 3600);
  const m = Math.floor((totalSeconds % 3600) / 60);
  const s = trim(totalSeconds - h * 3600 - m * 60, 9);
  return `${h > 0 ? `${h}h` : ''}${m}m${s}s`;
}
