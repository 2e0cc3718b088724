/**
 * Human-readable byte sizes as upstream's force-stream params take them: IEC `KiB`/`MiB`/`GiB`
 * (powers of 1024), SI `KB`/`MB`/`GB` (powers of 1000), or a bare number of bytes.
 */

const UNITS: Readonly<Record<string, number>> = {
  '': 1,
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
  kib: 1024,
  mib: 1024 ** 2,
  gib: 1024 ** 3,
  tib: 1024 ** 4,
};

/** Upstream's ceiling (int64); sizes are kept as JS numbers, exact up to 2^53. */
export const MAX_BUDGET_BYTES = 2 ** 63 - 1;

/** Bytes, or an error message (upstream's wording where it has one). */
export function parseByteSize(text: string): { bytes: number } | { error: string } {
  const m = /^\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  if (!m) return { error: `invalid size ${JSON.stringify(text)}` };
  const unit = UNITS[m[2]!.toLowerCase()];
  if (unit === undefined) return { error: `invalid size ${JSON.stringify(text)}: unknown unit ${JSON.stringify(m[2])}` };
  const value = Number(m[1]);
  if (value < 0) return { error: `invalid size ${JSON.stringify(text)}: negative` };
  return { bytes: Math.floor(value * unit) };
}
