/**
 * One inference request through the pipeline: parse the body once, run the steps, serialise the
 * final body once, and observe how it ended.
 */
import { RequestContext } from './context';
import type { Decision, ForwardDecision, Metadata, RespondDecision } from './decision';
import { type ErrorClass } from './errors';
import { runPipeline, type StepTiming } from './executor';
import { parseJsonBody, type ParsedJsonBody } from './json-body';
import { checkJsonDepth } from './json-depth';
import { NOOP_PIPELINE_OBSERVER, type DecisionPath, type RequestObservation } from './observer';
import { DEFAULT_REQUEST_LIMITS } from './request-limits';
import { checkInferenceRequest } from './request-shape';
import { RESPONSES_API_PATH, validateResponsesRequest } from './responses-request';
import { DEFAULT_FORWARD_RESPONSE_HEADERS } from './response-headers';
import { goDuration } from './go-duration';
import { redactBody, redactHeaders } from './redact';

import { BaseExchange, round, type HandlerOptions } from './exchange-base';

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

export class PipelineExchange extends BaseExchange {
  refused: RespondDecision | undefined;
  private readonly observation: RequestObservation;
  /**
   * Fires when the service is done with the request (see RequestContext.finished). Made on first
   * use: only a step that holds something until then (the async broker's quota slot) asks for it,
   * and aborting a controller builds and dispatches an Event (about 20 µs a request in a CPU profile).
   */
  private done: AbortController | undefined;
  /** Why the request ended, once it has: a signal asked for after that is born aborted. */
  private doneReason: string | undefined;
  /** complete() or tooLarge() began: they report the end of the request themselves. */
  private answering = false;
  private observed = false;
  private ctx: RequestContext | undefined;
  /** Set once the steps ran (whatever their outcome): upstream logs their timings then. */
  private timings: readonly StepTiming[] | undefined;
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
    this.finish(reason);
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
      this.finish('decided');
    }
    // The answer goes first: the transport hands it to the socket before the check phase's
    // JavaScript immediates (lean-call.ts). The step-timings line and the metrics, about 40 µs at
    // concurrency 1 in a CPU profile, are no longer between the last side call's answer and the
    // client's first byte. Over the network nothing changes: they are done before the next poll.
    setImmediate(PipelineExchange.afterAnswer, this, decision, performance.now());
    return decision;
  }

  /** Upstream's step-timings line and the request's observation, once the answer has left. */
  private static afterAnswer(this: void, x: PipelineExchange, decision: Decision, endedAt: number): void {
    if (x.timings && x.log.isLevelEnabled('info')) x.log.info(stepTimings(x.parseMs, x.timings), 'pipeline step timings');
    const path = decision.metadata['path_taken'] as DecisionPath;
    x.observe(path, decision.kind === 'respond' ? decision.status : undefined, path === 'error' ? x.failedWith : undefined, endedAt);
  }

  /** The first reason wins, as with `AbortController.abort`. */
  private finish(reason: string): void {
    if (this.doneReason !== undefined) return;
    this.doneReason = reason;
    this.done?.abort(reason);
  }

  private readonly finishedSignal = (): AbortSignal => {
    if (!this.done) {
      this.done = new AbortController();
      if (this.doneReason !== undefined) this.done.abort(this.doneReason);
    }
    return this.done.signal;
  };

  private observe(
    path: DecisionPath,
    status: number | undefined,
    failed: { errorClass: ErrorClass; step: string } | undefined,
    endedAt = performance.now(),
  ): void {
    if (this.observed) return;
    this.observed = true;
    const timings = this.timings ?? [];
    let stepMs = 0;
    for (const t of timings) stepMs += t.ms;
    this.observation.finished({
      path,
      status,
      errorClass: failed?.errorClass,
      errorStep: failed?.step,
      inputTokens: this.ctx?.tokenIds ? this.ctx.tokenIds.length : null,
      stepsStarted: timings.map((t) => t.step),
      disaggregation: this.ctx?.disaggregation ?? null,
      parseMs: this.parseMs,
      stepMs,
      endedAt,
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
      // Before the first step: a request the steps cannot read, or one past a limit, never reaches a worker or the queue.
      checkInferenceRequest(this.path, parsed.body, parsed.codec, this.opts.requestLimits ?? DEFAULT_REQUEST_LIMITS);
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
      finished: this.finishedSignal,
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
