/** Latency statistics and run metadata shared by the bench suites. */
import { cpus, platform, release, totalmem } from 'node:os';

/** Nearest-rank percentile of `values` (need not be sorted); NaN for an empty list. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1]!;
}

/** Rounded to 3 decimals (microsecond resolution in ms) for stable JSON. */
export const round3 = (n: number): number => Math.round(n * 1000) / 1000;

export interface Summary {
  readonly n: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly mean: number;
  readonly min: number;
  readonly max: number;
}

export function summarize(samples: readonly number[]): Summary {
  const mean = samples.reduce((a, b) => a + b, 0) / Math.max(1, samples.length);
  return {
    n: samples.length,
    p50: round3(percentile(samples, 50)),
    p90: round3(percentile(samples, 90)),
    p99: round3(percentile(samples, 99)),
    mean: round3(mean),
    min: round3(Math.min(...samples)),
    max: round3(Math.max(...samples)),
  };
}

/** One line describing where the numbers came from. */
export function machineDescription(extra: string[] = []): string {
  const cpu = cpus();
  return [
    `${cpu[0]?.model.trim() ?? 'unknown cpu'} x${cpu.length}`,
    `${Math.round(totalmem() / 2 ** 30)} GiB`,
    `${platform()} ${release()}`,
    `node ${process.version}`,
    ...extra,
  ].join(', ');
}
