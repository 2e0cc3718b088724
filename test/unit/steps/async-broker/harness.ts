/** Builds the step, its routes and hand-made request contexts, as the pipeline would. */
import { RequestContext, type JsonObject } from '../../../../src/pipeline/context';
import { sanitiseRequestId } from '../../../../src/pipeline/request-id';
import type { Route, StepDeps, StepResponse } from '../../../../src/pipeline/step';
import { silentLogger } from '../../../../src/observability/logger';
import type Redis from 'ioredis';
import { createAsyncBrokerStep, type AsyncBrokerStep } from '../../../../src/steps/async-broker';
import { RedisServer } from '../../../support/redis';

export interface Built {
  readonly step: AsyncBrokerStep;
  readonly routes: Route[];
}

export function deps(routes: Route[] = []): StepDeps {
  return {
    gateway: undefined,
    clientFor: (() => {
      throw new Error('not used');
    }) as never,
    gatewayTimeoutMs: 1000,
    log: silentLogger(),
    registerRoute: (r) => routes.push(r),
  };
}

const live: AsyncBrokerStep[] = [];

/** The step as the pipeline builds it (builder-injected params included). Closed by {@link closeAll}. */
export function build(params: Record<string, unknown>): Built {
  const routes: Route[] = [];
  const step = createAsyncBrokerStep({ use_openai_format: true, ...params }, deps(routes)) as AsyncBrokerStep;
  live.push(step);
  return { step, routes };
}

export async function closeAll(): Promise<void> {
  await Promise.all(live.splice(0).map((s) => s.close()));
}

export interface Req {
  readonly ctx: RequestContext;
  /** The client goes away. */
  readonly abort: () => void;
}

export function request(opts: { headers?: Record<string, string>; body?: JsonObject; path?: string } = {}): Req {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(opts.headers ?? {})) headers[k.toLowerCase()] = v;
  const controller = new AbortController();
  const ctx = new RequestContext({
    requestId: sanitiseRequestId(headers['x-request-id']).id,
    originalPath: opts.path ?? '/v1/chat/completions',
    headers,
    body: opts.body ?? { model: 'test-model', messages: [{ role: 'user', content: 'hi' }] },
    signal: controller.signal,
    log: silentLogger(),
  });
  return { ctx, abort: () => controller.abort('client went away') };
}

export async function route(
  routes: readonly Route[],
  method: string,
  path: string,
  headers: Record<string, string> = {},
  signal: AbortSignal = new AbortController().signal,
): Promise<StepResponse> {
  for (const r of routes) {
    if (r.method !== method) continue;
    const params = r.match(path);
    if (!params) continue;
    const lower: Record<string, string> = {};
    for (const [k, v] of Object.entries(headers)) lower[k.toLowerCase()] = v;
    return r.handle({ params, headers: lower, requestId: 'route-req', body: Buffer.alloc(0), signal, log: silentLogger() });
  }
  throw new Error(`no route for ${method} ${path}`);
}

export function text(r: StepResponse): string {
  if (!Buffer.isBuffer(r.body)) throw new Error('expected a complete body');
  return r.body.toString('utf8');
}

export function json(r: StepResponse): Record<string, unknown> {
  return JSON.parse(text(r)) as Record<string, unknown>;
}

/** The step's answer for a request, when it answered. */
export async function respond(step: AsyncBrokerStep, ctx: RequestContext): Promise<StepResponse> {
  const out = await step.execute(ctx);
  if (!out || !('respond' in out)) throw new Error('expected the step to answer');
  return out.respond;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * A real Redis for the suite (one server per test file) and a client on it. After each test every
 * step built with {@link build} is closed and the data flushed.
 */
export function useRedis(): { readonly server: RedisServer; readonly redis: Redis } {
  const env = {} as { server: RedisServer; redis: Redis };
  beforeAll(async () => {
    env.server = await RedisServer.start();
    env.redis = env.server.client();
  });
  afterEach(async () => {
    await closeAll();
    await env.redis.flushall();
  });
  afterAll(async () => {
    env.redis.disconnect();
    await env.server.destroy();
  });
  return env;
}
