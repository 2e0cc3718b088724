/**
 * The exchanges outside the pipeline: a head refused outright, a passthrough to decode, and a
 * step-registered route.
 */
import type { Decision, RespondDecision } from './decision';
import { type ScreenedHeaders } from './header-policy';
import { parseJsonBody } from './json-body';
import { checkRequestLimits, DEFAULT_REQUEST_LIMITS } from './request-limits';
import type { Route } from './step';

import { BaseExchange, type HandlerOptions } from './exchange-base';

/**
 * A request outside the pipeline refused from its head alone: a path the policy does not allow
 * (404, step `path`), or headers headRefusal refuses (400 or 431, step `headers`). No body is read.
 */
export class RefusedExchange extends BaseExchange {
  readonly refused: RespondDecision;

  constructor(opts: HandlerOptions, path: string, headers: Record<string, string>, reason: Error, step: 'path' | 'headers') {
    super(opts, path, headers);
    this.refused = this.failure(reason, step, [], {});
    opts.observer?.decided('error');
  }

  async complete(): Promise<Decision> {
    return this.refused;
  }
}

/**
 * Passthrough APIs whose JSON body carries the sampling fields of `pipeline.request_limits`
 * (Anthropic Messages: `max_tokens`, `stop_sequences`, ...). Only these bodies are parsed, once.
 */
const SAMPLING_PASSTHROUGH_PATHS: ReadonlySet<string> = new Set(['/v1/messages']);

/**
 * A request the pipeline does not run (the other OpenAI APIs the edge lets through): forwarded to
 * decode as upstream's passthrough of unregistered routes does (PR #2357), body as it came (capped
 * at the body limit: 413 above it), `EPP-Profile: decode`, our request id, and without the
 * client's gateway headers.
 */
export class PassthroughExchange extends BaseExchange {
  constructor(
    opts: HandlerOptions,
    path: string,
    private readonly screened: ScreenedHeaders,
  ) {
    super(opts, path, screened.headers);
  }

  async complete(body: Buffer): Promise<Decision> {
    if (SAMPLING_PASSTHROUGH_PATHS.has(this.path) && body.length > 0) {
      try {
        const parsed = parseJsonBody(body);
        checkRequestLimits(parsed.body, this.opts.requestLimits ?? DEFAULT_REQUEST_LIMITS, parsed.codec, 'either');
      } catch (err) {
        return this.failure(err, 'parse', [], {});
      }
    }
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
export class RouteExchange extends BaseExchange {
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
