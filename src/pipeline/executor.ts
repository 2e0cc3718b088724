import type { RequestContext } from './context';
import { CancelledError } from './errors';
import { NOOP_REQUEST_OBSERVATION, type RequestObservation } from './observer';
import type { Step, StepResponse } from './step';

export interface StepTiming {
  readonly step: string;
  readonly ms: number;
}

export type PipelineOutcome =
  | { readonly kind: 'completed'; readonly timings: StepTiming[] }
  | {
      readonly kind: 'responded';
      readonly response: StepResponse;
      readonly cacheHit: boolean;
      readonly step: string;
      readonly timings: StepTiming[];
    }
  | { readonly kind: 'failed'; readonly error: unknown; readonly step: string; readonly timings: StepTiming[] };

/**
 * Runs the steps strictly in order. Before each step the client's signal is checked; a step that
 * answers the client ends the pipeline; the first error ends it too. Never throws.
 */
export async function runPipeline(
  steps: readonly Step[],
  ctx: RequestContext,
  observer: RequestObservation = NOOP_REQUEST_OBSERVATION,
): Promise<PipelineOutcome> {
  const timings: StepTiming[] = [];
  for (const step of steps) {
    if (ctx.signal.aborted) {
      return { kind: 'failed', error: new CancelledError(), step: step.type, timings };
    }
    // Upstream's trace lines around every step (its e2e suite greps `step complete`).
    const trace = ctx.log.isLevelEnabled('trace');
    if (trace) ctx.log.trace({ step: step.type }, 'step starting');
    const started = performance.now();
    const observed = observer.stepStarted(step.type, ctx);
    try {
      const outcome = await step.execute(ctx);
      const ms = performance.now() - started;
      timings.push({ step: step.type, ms });
      observed.ended(ms);
      if (trace) ctx.log.trace({ step: step.type }, 'step complete');
      if (outcome && 'respond' in outcome) {
        return { kind: 'responded', response: outcome.respond, cacheHit: outcome.cacheHit === true, step: step.type, timings };
      }
    } catch (error) {
      const ms = performance.now() - started;
      timings.push({ step: step.type, ms });
      observed.ended(ms, error);
      return { kind: 'failed', error, step: step.type, timings };
    }
  }
  return { kind: 'completed', timings };
}
