const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * Parses a Go-style duration (`10s`, `1m30s`, `500ms`, `1.5h`) into milliseconds. Returns `null`
 * when the text is not a duration. A bare `0` is accepted, as in Go.
 */
export function parseDuration(text: string): number | null {
  const s = text.trim();
  if (s === '0') return 0;
  const re = /(\d+(?:\.\d+)?|\.\d+)(ns|us|µs|ms|s|m|h)/gy;
  let total = 0;
  let consumed = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s)) !== null) {
    total += parseFloat(m[1]!) * UNIT_MS[m[2]!]!;
    consumed = re.lastIndex;
  }
  if (consumed === 0 || consumed !== s.length) return null;
  return total;
}
