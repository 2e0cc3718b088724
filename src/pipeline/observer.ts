/**
 * Observation hooks of the pipeline: what metrics and tracing learn about a request, a step and a
 * decision. The pipeline only calls these interfaces; src/observability implements them. The no-op
 * default makes an unobserved pipeline cost a few empty calls per request.
 */
import type { DisaggregationPath, RequestContext } from './context';
import type { ErrorClass } from './errors';

/** What the service decided for one request Envoy showed it (`path_taken` in the access log). */
export type DecisionPath = 'cascade' | 'cache_hit' | 'step_response' | 'error' | 'passthrough' | 'route';

/** What {@link PipelineObserver.decided} reports. */
export type OutsideDecision = 'route' | 'passthrough' | 'error';

/** How one inference request ended, once. */
export interface RequestResult {
  readonly path: DecisionPath;
  /** The HTTP status answered locally, for `respond` decisions. */
  readonly status?: number;
  /** Set when the request failed; `error_step` names the step. */
  readonly errorClass?: ErrorClass;
  readonly errorStep?: string;
  /** Prompt tokens when a render ran (also 0), else `null`. */
  readonly inputTokens: number | null;
  /** Types of the steps that started, in order (one entry per run). */
  readonly stepsStarted: readonly string[];
  /** Set when a prefill step ran: whether it disaggregated or decode served the request alone. */
  readonly disaggregation?: DisaggregationPath | null;
  /** Body parse time and the sum of step durations, ms: the rest of the request is orchestration. */
  readonly parseMs: number;
  readonly stepMs: number;
  /**
   * When the request ended (`performance.now()`), the end of its duration: an observer may be told
   * a little later, once the answer has left (pipeline-exchange.ts, afterAnswer).
   */
  readonly endedAt: number;
}

/** One step run; `ended` is called exactly once. */
export interface StepObservation {
  /**
   * `ms` is how long the step took (the executor's own measure: an observer need not time it);
   * `error` is what the step threw (undefined on success or a local answer).
   */
  ended(ms: number, error?: unknown): void;
}

/** One inference request (an exchange on an inference path). */
export interface RequestObservation {
  /** The body was parsed: `ctx.model` is known. */
  parsed(ctx: RequestContext, bodyBytes: number): void;
  stepStarted(step: string, ctx: RequestContext): StepObservation;
  /** Called once, however the request ends (answer, error, client gone). */
  finished(result: RequestResult): void;
}

export interface RequestStart {
  readonly method: string;
  /** Path without the query string. */
  readonly path: string;
  /** Inbound headers (lower-case, first value). */
  readonly headers: Readonly<Record<string, string>>;
}

export interface PipelineObserver {
  /** An inference request began (its body has not arrived yet). */
  requestStarted(start: RequestStart): RequestObservation;
  /**
   * A decision outside the pipeline: a step-registered route answered, the request passed to
   * decode, or its head was refused (a path not allowed, headers we cannot forward).
   */
  decided(path: OutsideDecision): void;
}

const NOOP_STEP: StepObservation = { ended: () => undefined };
const NOOP_REQUEST: RequestObservation = {
  parsed: () => undefined,
  stepStarted: () => NOOP_STEP,
  finished: () => undefined,
};

export const NOOP_PIPELINE_OBSERVER: PipelineObserver = {
  requestStarted: () => NOOP_REQUEST,
  decided: () => undefined,
};

export const NOOP_REQUEST_OBSERVATION: RequestObservation = NOOP_REQUEST;

/** Fans every hook out to each observer (metrics and tracing side by side). */
export function combineObservers(observers: readonly PipelineObserver[]): PipelineObserver {
  const list = observers.filter((o) => o !== NOOP_PIPELINE_OBSERVER);
  if (list.length === 0) return NOOP_PIPELINE_OBSERVER;
  if (list.length === 1) return list[0]!;
  return {
    requestStarted(start) {
      const reqs = list.map((o) => o.requestStarted(start));
      return {
        parsed: (ctx, bytes) => {
          for (const r of reqs) r.parsed(ctx, bytes);
        },
        stepStarted: (step, ctx) => {
          const steps = reqs.map((r) => r.stepStarted(step, ctx));
          return {
            ended: (ms, error) => {
              for (const s of steps) s.ended(ms, error);
            },
          };
        },
        finished: (result) => {
          for (const r of reqs) r.finished(result);
        },
      };
    },
    decided(path) {
      for (const o of list) o.decided(path);
    },
  };
}
