/**
 * How many cases each fuzz level runs, and with which seed. CI runs a fixed seed and 10k cases in
 * total; `npm run fuzz` (scripts/fuzz.ts) sets FUZZ_CASES and a fresh FUZZ_SEED, and prints it.
 *
 * FUZZ_CASES   total cases across the levels (default 10000)
 * FUZZ_SEED    fast-check seed (default a fixed one, so CI is reproducible)
 * FUZZ_PATH    fast-check replay path of a failure (with its seed)
 */
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Parameters } from 'fast-check';

export const DEFAULT_FUZZ_SEED = 0x8c1f_2026;
export const DEFAULT_FUZZ_CASES = 10_000;

/** Share of the total each level runs: the in-process protocol level is cheap, HTTP through Envoy is not. */
const SHARE = { protocol: 0.7, http: 0.2, raw: 0.1 } as const;
export type FuzzLevel = keyof typeof SHARE;

function envInt(name: string, def: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return def;
  const n = Number(raw);
  if (!Number.isSafeInteger(n)) throw new Error(`${name}: expected an integer, got ${JSON.stringify(raw)}`);
  return n;
}

export function fuzzSeed(): number {
  return envInt('FUZZ_SEED', DEFAULT_FUZZ_SEED);
}

export function fuzzCases(level: FuzzLevel): number {
  return Math.max(1, Math.round(envInt('FUZZ_CASES', DEFAULT_FUZZ_CASES) * SHARE[level]));
}

/** fast-check parameters for a level; failures report the seed and path to replay them. */
export function fuzzParameters<T>(level: FuzzLevel): Parameters<T> {
  const path = process.env['FUZZ_PATH'];
  return {
    numRuns: fuzzCases(level),
    seed: fuzzSeed(),
    ...(path ? { path } : {}),
  };
}

/** A generous per-test deadline: `perCaseMs` per case plus start-up. */
export function fuzzTimeout(level: FuzzLevel, perCaseMs: number): number {
  return 60_000 + fuzzCases(level) * perCaseMs;
}

/** The replay line printed with every failure. */
export function replayHint(level: FuzzLevel): string {
  return `fuzz ${level}: seed ${fuzzSeed()} (replay: FUZZ_SEED=${fuzzSeed()} FUZZ_CASES=${envInt('FUZZ_CASES', DEFAULT_FUZZ_CASES)} npx jest test/fuzz, adding FUZZ_PATH=<path> from the report)`;
}

/** A fast-check failure report, with every line cut to `max` characters (counterexamples can be megabytes). */
export function shortReport(level: FuzzLevel, err: unknown, max = 1500): Error {
  const cause = (err as { cause?: unknown })?.cause;
  const why = cause instanceof Error ? `\nCause: ${cause.message}\n${(cause.stack ?? '').split('\n').slice(1, 6).join('\n')}` : '';
  const stack =
    err instanceof Error && !err.message.includes('Property failed') ? `\n${(err.stack ?? '').split('\n').slice(1, 12).join('\n')}` : '';
  const text = (err instanceof Error ? err.message : String(err)) + why + stack;
  const lines = text.split('\n').map((l) => (l.length > max ? `${l.slice(0, max)}... [${l.length - max} more chars]` : l));
  // The whole report (counterexample included) goes to a file for replay and debugging.
  const file = join(tmpdir(), `epd-fuzz-${level}-${process.pid}.txt`);
  try {
    writeFileSync(file, text);
  } catch {
    // reporting must not mask the failure
  }
  return new Error(`${replayHint(level)}\nfull report: ${file}\n${lines.slice(0, 60).join('\n')}`);
}
