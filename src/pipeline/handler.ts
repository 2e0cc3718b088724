import type { Logger } from 'pino';
import { RequestContext } from './context';
import type { Decision, Exchange, ForwardDecision, HeaderBudget, Metadata, RequestHandler, RequestHead, RespondDecision } from './decision';
import { BadRequestError, PayloadTooLargeError, TooManyHeadersError, UpstreamError, classify, errorBody, type ErrorClass } from './errors';
import { runPipeline, type StepTiming } from './executor';
import { parseJsonBody, type ParsedJsonBody } from './json-body';
import { checkJsonDepth } from './json-depth';
import { NOOP_PIPELINE_OBSERVER, type DecisionPath, type PipelineObserver, type RequestObservation } from './observer';
import { sanitiseRequestId } from './request-id';
import { isInferenceRequest, stripQuery } from './inference-request';
import { RESPONSES_API_PATH, validateResponsesRequest } from './responses-request';
import { DEFAULT_FORWARD_RESPONSE_HEADERS } from './response-headers';
import { goDuration } from './go-duration';
import { redactBody, redactHeaders } from './redact';
import { DEFAULT_HEADER_POLICY, invalidHeaderMessage, screenHeaders, type HeaderPolicy, type ScreenedHeaders } from './header-policy';
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
  /** Which gateway headers a client may set (header-policy.ts); default none. */
  readonly headerPolicy?: HeaderPolicy;
  /**
   * Refuses, by throwing (a BadRequestError: 400), a request this pipeline cannot serve, before
   * any step runs: e.g. an image on a pipeline without replace-media-urls (steps/pipeline-coverage.ts).
   */
  readonly admit?: (ctx: RequestContext) => void;
}

const JSON_HEADERS = { 'content-type': 'application/json' } as const;

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}

function timingMetadata(timings: readonly StepTiming[]): Metadata {
  const stepMs: Record<string, number> = {};
  for (const t of timings) stepMs[t.step] = round((stepMs[t.step] ?? 0) + t.ms);
  return { step_ms: stepMs, steps: timings.map((t) => `${t.step}:${round(t.ms)}`).join(',') };
}

/** Upstream's `pipeline step timings` fields: `parse` and each step, as Go duration strings. */
function stepTimings(parseMs: number, timings: readonly StepTiming[]): Record<string, string> {
  const out: Record<string, string> = {};
  if (parseMs > 0) out['parse'] = goDuration(parseMs);
  for (const t of timings) out[t.step] = goDuration(t.ms);
  return out;
}

/** One part is sent as one buffer (every small body); several are kept apart, never concatenated. */
function forwardBody(parts: Buffer[]): Buffer | readonly Buffer[] {
  return parts.length === 1 ? parts[0]! : parts;
}

/**
 * Bridges the protocol layer to the pipeline: one {@link Exchange} per inference request. It parses
 * the body once, runs the steps, serialises the final body once, and turns every outcome into a
 * {@link Decision} carrying the access-log metadata.
 */
export class PipelineHandler implements RequestHandler {
  constructor(private readonly opts: HandlerOptions) {}

  begin(head: RequestHead): Exchange | null {
    const path = stripQuery(head.path);
    // Before anything reads them: untrusted gateway headers go, a non-ASCII value is refused.
    const screened = screenHeaders(head.headers, this.opts.headerPolicy ?? DEFAULT_HEADER_POLICY, head.origin, head.laterValues);
    const refusal = headRefusal(head.headerBudgetExceeded, screened.invalid);
    if (isInferenceRequest(head.method, path) && !this.routeFor(head.method, path)) {
      const exchange = new PipelineExchange(this.opts, path, screened.headers, head.method, screened.removed);
      if (refusal) exchange.refuse(refusal);
      return exchange;
    }
    // Outside the pipeline the head is refused the same way, answered at once.
    if (refusal) return new RefusedExchange(this.opts, path, screened.headers, refusal);
    const matched = this.routeFor(head.method, path);
    if (matched) return new RouteExchange(this.opts, path, screened.headers, matched.route, matched.params);
    this.opts.observer?.decided('passthrough');
    return new PassthroughExchange(this.opts, path, screened);
  }

  private routeFor(method: string, path: string): { route: Route; params: Record<string, string> } | undefined {
    for (const route of this.opts.routes ?? []) {
      if (route.method !== method) continue;
      const params = route.match(path);
      if (params) return { route, params };
    }
    return undefined;
  }
}

/**
 * Why the head alone refuses a request, if it does: a header value we would not forward (400,
 * naming it), or more headers than leave room for our mutation (431).
 */
function headRefusal(budget: HeaderBudget | undefined, invalidHeader: string | undefined): Error | undefined {
  if (invalidHeader !== undefined) return new BadRequestError(invalidHeaderMessage(invalidHeader));
  if (budget) return new TooManyHeadersError(budget.entries, budget.allowed);
  return undefined;
}

/** What every exchange shares: the request id, the abort signal, and how failures are answered. */
abstract class BaseExchange implements Exchange {
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
      this.log.debug({ ...fields, upstream_body: err.body }, 'upstream error body (not returned to the client)');
    }
    if (c.status >= 500) this.log.warn(fields, 'request failed');
    else this.log.info(fields, 'request rejected');
    this.failedWith = { errorClass: c.errorClass, step };
    const extra: Metadata = { ...facts, status: c.status, error_step: step, error_class: c.errorClass };
    if (c.upstreamStatus !== undefined) extra['upstream_status'] = c.upstreamStatus;
    return {
      kind: 'respond',
      status: c.status,
      headers: { ...JSON_HEADERS },
      body: errorBody(c),
      metadata: this.metadata('error', timings, extra),
    };
  }
}

/** A request outside the pipeline refused from its head alone (400 or 431, see headRefusal): no body is read. */
class RefusedExchange extends BaseExchange {
  readonly refused: RespondDecision;

  constructor(opts: HandlerOptions, path: string, headers: Record<string, string>, reason: Error) {
    super(opts, path, headers);
    this.refused = this.failure(reason, 'headers', [], {});
  }

  async complete(): Promise<Decision> {
    return this.refused;
  }
}

/**
 * A request the pipeline does not run (the other OpenAI APIs the edge lets through): forwarded to
 * decode as upstream's passthrough of unregistered routes does (PR #2357), body as it came (capped
 * at the body limit: 413 above it), `EPP-Profile: decode`, our request id, and without the
 * client's gateway headers.
 */
class PassthroughExchange extends BaseExchange {
  constructor(
    opts: HandlerOptions,
    path: string,
    private readonly screened: ScreenedHeaders,
  ) {
    super(opts, path, screened.headers);
  }

  async complete(): Promise<Decision> {
    return {
      kind: 'forward',
      setHeaders: { 'epp-profile': 'decode', 'x-request-id': this.requestId },
      removeHeaders: this.screened.removed.filter((h) => h !== 'epp-profile'),
      body: null,
      metadata: this.metadata('passthrough', [], {}),
    };
  }
}

/** A request answered by a step-registered {@link Route}. */
class RouteExchange extends BaseExchange {
  constructor(
    opts: HandlerOptions,
    path: string,
    headers: Record<string, string>,
    private readonly route: Route,
    private readonly params: Record<string, string>,
  ) {
    super(opts, path, headers);
  }

  async complete(body: Buffer): Promise<Decision> {
    const started = performance.now();
    this.opts.observer?.decided('route');
    try {
      const r = await this.route.handle({
        params: this.params,
        headers: this.headers,
        requestId: this.requestId,
        body,
        signal: this.controller.signal,
        log: this.log,
      });
      const timings = [{ step: 'route', ms: performance.now() - started }];
      return {
        kind: 'respond',
        status: r.status,
        headers: r.headers,
        body: r.body,
        metadata: this.metadata('route', timings, { status: r.status }),
      };
    } catch (err) {
      return this.failure(err, 'route', [{ step: 'route', ms: performance.now() - started }], {});
    }
  }
}

class PipelineExchange extends BaseExchange {
  refused: RespondDecision | undefined;
  private readonly observation: RequestObservation;
  /** Fires when the service is done with the request (see RequestContext.finished). */
  private readonly done = new AbortController();
  /** complete() or tooLarge() began: they report the end of the request themselves. */
  private answering = false;
  private observed = false;
  private ctx: RequestContext | undefined;
  private timings: readonly StepTiming[] = [];
  private parseMs = 0;

  constructor(
    opts: HandlerOptions,
    path: string,
    headers: Record<string, string>,
    method: string,
    /** Untrusted gateway headers the client sent: the forwarded request must not carry them. */
    private readonly untrusted: readonly string[],
  ) {
    super(opts, path, headers);
    this.observation = (opts.observer ?? NOOP_PIPELINE_OBSERVER).requestStarted({ method, path, headers });
  }

  override abort(reason: string): void {
    super.abort(reason);
    this.done.abort(reason);
    // Gone before the body was complete: nothing else will end this request's observation.
    if (!this.answering) this.observe('error', undefined, { errorClass: 'cancelled', step: 'receive' });
  }

  /** The head alone refuses the request: answered like any failure, so it is observed like one. */
  refuse(reason: Error): void {
    this.answering = true;
    this.refused = this.failure(reason, 'headers', [], {});
    this.observe('error', this.refused.status, this.failedWith);
  }

  override tooLarge(receivedBytes: number): Decision {
    this.answering = true;
    const decision = super.tooLarge(receivedBytes);
    this.observe('error', 413, this.failedWith);
    return decision;
  }

  complete(raw: Buffer): Promise<Decision> {
    return this.completeParts([raw], raw.length);
  }

  /** The body as Envoy streamed it: parsed from the chunks, never concatenated whole. */
  async completeParts(parts: readonly Buffer[], length: number): Promise<Decision> {
    this.answering = true;
    let decision: Decision;
    try {
      decision = await this.decide(parts, length);
    } finally {
      this.done.abort('decided');
    }
    const path = decision.metadata['path_taken'] as DecisionPath;
    this.observe(path, decision.kind === 'respond' ? decision.status : undefined, path === 'error' ? this.failedWith : undefined);
    return decision;
  }

  private observe(path: DecisionPath, status: number | undefined, failed: { errorClass: ErrorClass; step: string } | undefined): void {
    if (this.observed) return;
    this.observed = true;
    let stepMs = 0;
    for (const t of this.timings) stepMs += t.ms;
    this.observation.finished({
      path,
      status,
      errorClass: failed?.errorClass,
      errorStep: failed?.step,
      inputTokens: this.ctx?.tokenIds ? this.ctx.tokenIds.length : null,
      stepsStarted: this.timings.map((t) => t.step),
      disaggregation: this.ctx?.disaggregation ?? null,
      parseMs: this.parseMs,
      stepMs,
    });
  }

  /**
   * The decode leg as upstream's decode proxy logs it: at debug the headers it goes out with, at
   * trace also the redacted body. Envoy sends it, so this is the last the service sees of it.
   */
  private logDecodeRequest(ctx: RequestContext, set: Record<string, string>, remove: readonly string[], parts: Buffer[]): void {
    const headers: Record<string, string> = { ...ctx.headers };
    for (const name of remove) delete headers[name];
    Object.assign(headers, set);
    let bodyLen = 0;
    for (const p of parts) bodyLen += p.length;
    const redacted = redactHeaders(headers);
    this.log.debug({ method: 'POST', path: ctx.originalPath, bodyLen, headers: redacted }, 'request body');
    if (this.log.isLevelEnabled('trace'))
      this.log.trace({ method: 'POST', path: ctx.originalPath, headers: redacted, body: redactBody(parts) }, 'request body');
  }

  /**
   * The forward plus the client's untrusted gateway headers to remove, except those the service
   * sets itself (a set wins; removing it too would drop ours).
   */
  private withRemovals(d: ForwardDecision): ForwardDecision {
    const out = new Set(d.removeHeaders);
    for (const name of this.untrusted) if (!(name in d.setHeaders)) out.add(name);
    return { ...d, removeHeaders: [...out] };
  }

  private async decide(raw: readonly Buffer[], length: number): Promise<Decision> {
    const parseStart = performance.now();
    // Parsed once; anything but a JSON object is a 400, as upstream.
    let parsed: ParsedJsonBody;
    try {
      parsed = parseJsonBody(raw);
      checkJsonDepth(parsed.body);
      if (this.path === RESPONSES_API_PATH) validateResponsesRequest(parsed.body);
    } catch (err) {
      return this.failure(err, 'parse', [], {});
    }
    const parseMs = (this.parseMs = performance.now() - parseStart);
    const ctx = (this.ctx = new RequestContext({
      requestId: this.requestId,
      originalPath: this.path,
      headers: this.headers,
      body: parsed.body,
      codec: parsed.codec,
      signal: this.controller.signal,
      finished: this.done.signal,
      log: this.log,
      relayResponseHeaders: this.opts.forwardResponseHeaders ?? DEFAULT_FORWARD_RESPONSE_HEADERS,
    }));
    this.observation.parsed(ctx, length);
    try {
      this.opts.admit?.(ctx);
    } catch (err) {
      return this.failure(err, 'admission', [], { parse_ms: round(parseMs) });
    }
    const outcome = await runPipeline(this.opts.steps, ctx, this.observation);
    this.timings = outcome.timings;
    if (this.log.isLevelEnabled('info')) this.log.info(stepTimings(parseMs, outcome.timings), 'pipeline step timings');
    const facts: Metadata = {
      parse_ms: round(parseMs),
      token_count: ctx.tokenIds?.length ?? 0,
      mm_entries: ctx.multimodalEntries.length,
    };
    if (ctx.disaggregation) facts['disaggregation'] = ctx.disaggregation;
    switch (outcome.kind) {
      case 'failed':
        return this.failure(outcome.error, outcome.step, outcome.timings, facts);
      case 'responded': {
        const r = outcome.response;
        return {
          kind: 'respond',
          status: r.status,
          headers: r.headers,
          body: r.body,
          metadata: this.metadata(outcome.cacheHit ? 'cache_hit' : 'step_response', outcome.timings, { ...facts, status: r.status }),
        };
      }
      case 'completed':
        if (!ctx.decode) {
          // No step produced a decode request: the client's request goes on as it came.
          return this.withRemovals({
            kind: 'forward',
            setHeaders: { ...ctx.stampedHeaders() },
            removeHeaders: [],
            body: null,
            metadata: this.metadata('passthrough', outcome.timings, facts),
          });
        }
        try {
          const parts = ctx.serialize(ctx.body);
          const decision = this.withRemovals({
            kind: 'forward',
            setHeaders: { ...ctx.stampedHeaders(), ...ctx.relayedHeaders(), ...ctx.decode.headers },
            removeHeaders: [...(ctx.decode.removeHeaders ?? []), ...ctx.discardedClientHeaders()],
            body: forwardBody(parts),
            metadata: this.metadata('cascade', outcome.timings, facts),
          });
          if (this.log.isLevelEnabled('debug')) this.logDecodeRequest(ctx, decision.setHeaders, decision.removeHeaders, parts);
          return decision;
        } catch (err) {
          return this.failure(err, 'decode', outcome.timings, facts);
        }
    }
  }
}
