import type { Logger } from 'pino';
import type { RequestContext } from './context';
import type { SideCallClient } from './side-call';

/** A locally generated answer that ends the pipeline (e.g. a served conditional-decode probe). */
export interface StepResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: Buffer | AsyncIterable<Buffer>;
}

/**
 * `undefined`: continue with the next step. `{respond}`: stop and answer the client with it.
 * `cacheHit` marks a worker's answer served instead of the cascade (a conditional-decode hit,
 * `path_taken: cache_hit`); any other local answer is the step's own (`path_taken: step_response`:
 * the async broker's 202 enqueue and its refusals, say).
 */
export type StepOutcome = void | { readonly respond: StepResponse; readonly cacheHit?: boolean };

/**
 * Hooks for a step that owns connections of its own (the async broker's Redis). All optional; the
 * service calls the ones a step has.
 */
export interface StepLifecycle {
  /** Called once before the service listens. A rejection stops start-up (a dependency that is down). */
  start?(): Promise<void>;
  /** Gates readiness: the service is not ready while it resolves false. Never rejects. */
  ready?(): Promise<boolean>;
  /** Reports a dependency's health without gating readiness (used when there is no `ready`). Never rejects. */
  ping?(): Promise<boolean>;
  /** Releases what `start` opened, at shutdown. Idempotent. */
  close?(): Promise<void>;
  /**
   * The queues this step feeds, measured now (read at scrape time). An empty list when another
   * replica reports them, or the store cannot be read. Never rejects.
   */
  queueStats?(): Promise<readonly QueueStat[]>;
}

/** One queue's backlog: the jobs waiting, and the age of the oldest (`null` when empty or unknown). */
export interface QueueStat {
  readonly queue: string;
  readonly depth: number;
  readonly oldestAgeSeconds: number | null;
}

export interface Step extends StepLifecycle {
  /** The registered type name, e.g. `prefill`. */
  readonly type: string;
  execute(ctx: RequestContext): Promise<StepOutcome>;
}

export type StepParams = Record<string, unknown>;

/** A request the service answers itself rather than through the pipeline (e.g. `GET /v1/requests/{id}`). */
export interface Route {
  readonly method: string;
  /** Captured path params when `path` (without query) is this route's, else `null`. */
  match(path: string): Record<string, string> | null;
  handle(req: RouteRequest): Promise<StepResponse>;
}

export interface RouteRequest {
  readonly params: Record<string, string>;
  /** Lower-case names, first value of each. */
  readonly headers: Record<string, string>;
  readonly requestId: string;
  readonly body: Buffer;
  readonly signal: AbortSignal;
  readonly log: Logger;
}

/** What a step factory may use. Steps never see Envoy or gRPC. */
export interface StepDeps {
  /**
   * Pooled client for `gateway.address` (encode, prefill, decode, conditional-decode); absent when
   * no address is configured. A step that needs it refuses to build without it.
   */
  readonly gateway: SideCallClient | undefined;
  /** Builds a pooled client for another base URL (render's own address). */
  readonly clientFor: (baseUrl: string, opts: { maxIdleConns: number; idleTimeoutMs: number }) => SideCallClient;
  /** Response-header timeout of gateway legs, ms (`gateway.timeout`). */
  readonly gatewayTimeoutMs: number;
  readonly log: Logger;
  /** Lets a step answer extra routes of its own (the async broker's result routes). */
  readonly registerRoute: (route: Route) => void;
  /** Decode `force_stream` outcomes and reserved bytes, for metrics; absent = not recorded. */
  readonly forceStream?: ForceStreamObserver;
}

/** What metrics learn of decode `force_stream` (upstream's `result` label values). */
export interface ForceStreamObserver {
  result(modelName: string, result: 'forced' | 'fallback_budget' | 'fallback_unbounded' | 'fallback_unsupported' | 'error_ceiling'): void;
  /** Bytes currently reserved by buffered force-stream requests, after every change. */
  reservedBytes(bytes: number): void;
}

/** Validates params up front and returns a ready step; throws {@link ConfigError} on bad params. */
export type StepFactory = (params: StepParams, deps: StepDeps) => Step;
