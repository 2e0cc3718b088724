import type { Logger } from 'pino';
import type { RequestContext } from './context';
import type { SideCallClient } from '../gateway/client';

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

/** What a step factory may use. Steps never see Envoy or gRPC. */
export interface StepDeps {
  /** Pooled client for `gateway.address` (encode, prefill, conditional-decode). */
  readonly gateway: SideCallClient;
  /** Builds a pooled client for another base URL (render's own address). */
  readonly clientFor: (baseUrl: string, opts: { maxIdleConns: number; idleTimeoutMs: number }) => SideCallClient;
  /** Response-header timeout of gateway legs, ms (`gateway.timeout`). */
  readonly gatewayTimeoutMs: number;
  readonly log: Logger;
}

/** Validates params up front and returns a ready step; throws {@link ConfigError} on bad params. */
export type StepFactory = (params: StepParams, deps: StepDeps) => Step;
