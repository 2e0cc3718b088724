import type { Logger } from 'pino';
import type { RequestContext } from './context';
import type { SideCallClient } from './side-call';

/** A locally generated answer that ends the pipeline (e.g. a served conditional-decode probe). */
export interface StepResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: Buffer | AsyncIterable<Buffer>;
}

/** `undefined`: continue with the next step. `{respond}`: stop and answer the client with it. */
export type StepOutcome = void | { readonly respond: StepResponse };

export interface Step {
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
  /** Pooled client for `gateway.address` (encode, prefill, conditional-decode). */
  readonly gateway: SideCallClient;
  /** Builds a pooled client for another base URL (render's own address). */
  readonly clientFor: (baseUrl: string, opts: { maxIdleConns: number; idleTimeoutMs: number }) => SideCallClient;
  /** Response-header timeout of gateway legs, ms (`gateway.timeout`). */
  readonly gatewayTimeoutMs: number;
  readonly log: Logger;
  /** Lets a step answer extra routes of its own (the async broker's result routes). */
  readonly registerRoute: (route: Route) => void;
}

/** Validates params up front and returns a ready step; throws {@link ConfigError} on bad params. */
export type StepFactory = (params: StepParams, deps: StepDeps) => Step;
