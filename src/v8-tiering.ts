/**
 * V8 tier-up thresholds for this service. Imported first by main.ts, before any other module, so
 * that every function the service compiles gets them.
 *
 * The hot path (one ext_proc stream, two side calls, the pipeline) runs each of its functions about
 * once per request. V8 optimises a function only after it has executed a fixed amount of bytecode
 * (Node 20: `--interrupt-budget` 66 KiB, three times) or a fixed number of calls (Node 22+: Maglev
 * after 400, TurboFan after 3,000). At a few requests per second that takes the better part of an
 * hour, and until then the service runs in the interpreter and the baseline tier (`perf` showed
 * `Builtins_LoadIC`, `BaselineOutOfLinePrologue` at the top). With a quarter of the budget, the
 * compare bench (`npm run bench -- compare`, non-streaming at concurrency 8, after a 600-request
 * warm-up) measured the service's CPU per request at 1.48 ms instead of 2.05 ms on Node 20.
 *
 * `EPD_V8_TIERING=off` leaves V8's defaults alone.
 */
import { setFlagsFromString } from 'node:v8';

/** Node 20's V8 11.3 default is 66 KiB (`--interrupt-budget=67584`). */
export const INTERRUPT_BUDGET_BYTES = 16 * 1024;

/** The flags for the running V8, or none where we have not measured one. */
export function tieringFlags(nodeMajor: number): string[] {
  if (nodeMajor === 20) return [`--interrupt-budget=${INTERRUPT_BUDGET_BYTES}`];
  // Node 24 (V8 13.6, Maglev on) counts calls instead; lowering its counts (Maglev 100, TurboFan
  // 600, 100 after an IC update) measured 1.52 against 1.57 ms per request: noise, so not set.
  return [];
}

if (process.env['EPD_V8_TIERING'] !== 'off') {
  for (const flag of tieringFlags(Number(process.versions.node.split('.')[0]))) setFlagsFromString(flag);
}
