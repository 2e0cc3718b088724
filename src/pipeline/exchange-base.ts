/**
 * What every exchange shares (the request id, the abort signal, how a failure is answered and the
 * access-log metadata), and the handler's options.
 */
import type { Logger } from 'pino';
import { RequestContext } from './context';
import type { Decision, Exchange, Metadata, RespondDecision } from './decision';
import { PayloadTooLargeError, UpstreamError, classify, errorBody, type ErrorClass } from './errors';
import { type StepTiming } from './executor';
import { type PipelineObserver } from './observer';
import { decimal } from './go-duration';
import { sanitiseRequestId } from './request-id';
import type { RequestLimits } from './request-limits';
import { type HeaderPolicy } from './header-policy';
import { type PathPolicy } from './path-policy';
import type { Route, Step } from './step';

export interface HandlerOptions {
  readonly steps: readonly Step[];
  /** Requests the service answers itself (registered by steps); matched before the inference paths. */
  readonly routes?: readonly Route[];
  readonly maxBodyBytes: number;
  readonly log: Logger;
  /** Metrics and tracing hooks; default none. */
  readonly observer?: PipelineObserver;
  /** `pipeline.forward_response_headers` (validated, lower-case); default upstream's `[x-llm-d-disagg-revision]`. */
  readonly forwardResponseHeaders?: readonly string[];
  /** The paths served (`server.allowed_paths`, path-policy.ts); default the built-in list. */
  readonly pathPolicy?: PathPolicy;
  /** Which gateway headers a client may set (header-policy.ts); default none. */
  readonly headerPolicy?: HeaderPolicy;
  /**
   * Refuses, by throwing (a BadRequestError: 400), a request this pipeline cannot serve, before
   * any step runs: e.g. an image on a pipeline without replace-media-urls (steps/pipeline-coverage.ts).
   */
  readonly admit?: (ctx: RequestContext) => void;
  /** `pipeline.request_limits`; default the documented defaults. */
  readonly requestLimits?: RequestLimits;
}

export const JSON_HEADERS = { 'content-type': 'application/json' } as const;

export function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}

/** `String(round(ms))`, printed from integer hundredths (no double-to-string conversion). */
function roundedText(ms: number): string {
  const h = Math.round(ms * 100);
  return decimal(Math.floor(h / 100), h % 100, 2);
}

export function timingMetadata(timings: readonly StepTiming[]): Metadata {
  const stepMs: Record<string, number> = {};
  let steps = '';
  for (let i = 0; i < timings.length; i++) {
    const t = timings[i]!;
    stepMs[t.step] = round((stepMs[t.step] ?? 0) + t.ms);
    steps += `${i === 0 ? '' : ','}${t.step}:${roundedText(t.ms)}`;
  }
  return { step_ms: stepMs, steps };
}

/** What every exchange shares: the request id, the abort signal, and how failures are answered. */
export abstract class BaseExchange implements Exchange {
  readonly maxBodyBytes: number;
  protected readonly controller = new AbortController();
  protected readonly requestId: string;
  protected readonly log: Logger;
  private readonly started = performance.now();
  /** The error behind the last {@link failure} answer, for observers. */
  protected failedWith: { readonly errorClass: ErrorClass; readonly step: string } | undefined;

  constructor(
    protected readonly opts: HandlerOptions,
    protected readonly path: string,
    protected readonly headers: Record<string, string>,
  ) {
    this.maxBodyBytes = opts.maxBodyBytes;
    const rid = sanitiseRequestId(headers['x-request-id']);
    this.requestId = rid.id;
    this.log = opts.log.child({ 'x-request-id': rid.id });
    if (rid.rejectedLength !== undefined)
      this.log.info({ length: rid.rejectedLength }, 'client x-request-id rejected; generated a new one');
  }

  abort(reason: string): void {
    if (!this.controller.signal.aborted) {
      this.log.debug({ reason }, 'stream ended before the pipeline finished; aborting side calls');
      this.controller.abort(reason);
    }
  }

  tooLarge(receivedBytes: number): Decision {
    this.log.info({ received_bytes: receivedBytes, limit: this.maxBodyBytes }, 'request body too large');
    return this.failure(new PayloadTooLargeError(), 'parse', [], {});
  }

  abstract complete(raw: Buffer): Promise<Decision>;

  protected metadata(path: string, timings: readonly StepTiming[], extra: Metadata): Metadata {
    return {
      request_id: this.requestId,
      path_taken: path,
      ...timingMetadata(timings),
      ...extra,
      total_ms: round(performance.now() - this.started),
    };
  }

  protected failure(err: unknown, step: string, timings: readonly StepTiming[], facts: Metadata): RespondDecision {
    const c = classify(err, this.requestId);
    const fields = { step, error_class: c.errorClass, status: c.status, upstream_status: c.upstreamStatus, err: (err as Error)?.message };
    if (err instanceof UpstreamError && this.log.isLevelEnabled('debug')) {
      this.log.debug({ ...fields, upstream_body: err.body }, 'upstream error body (of a 4xx only the sanitised message is returned)');
    }
    if (c.status >= 500) this.log.warn(fields, 'request failed');
    else this.log.info(fields, 'request rejected');
    this.failedWith = { errorClass: c.errorClass, step };
    const extra: Metadata = { ...facts, status: c.status, error_step: step, error_class: c.errorClass };
    if (c.upstreamStatus !== undefined) extra['upstream_status'] = c.upstreamStatus;
    return {
      kind: 'respond',
      status: c.status,
      // The id the message names, where a client's SDK looks for it (`x-request-id`), as on a decode answer.
      headers: { ...JSON_HEADERS, 'x-request-id': this.requestId },
      body: errorBody(c),
      metadata: this.metadata('error', timings, extra),
    };
  }
}
