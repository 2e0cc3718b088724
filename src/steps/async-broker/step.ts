/**
 * The `async-broker` step: requests with the mode header are
 * classified and stamped (passthrough), or queued for llm-d-async (enqueue, wait); requests without
 * it are untouched.
 */
import type { Logger } from 'pino';
import type { RequestContext } from '../../pipeline/context';
import type { QueueStat, Step, StepDeps, StepOutcome, StepResponse } from '../../pipeline/step';
import { STEP_NAME, type AsyncBrokerConfig, type QueuedMode } from './config';
import { requestKeys } from './keys';
import { QuotaClassifier } from './quota';
import { configuredQueues, QueueStats } from './queue-stats';
import { checkRequest, modeValue } from './request';
import { ENQUEUE_FAILED_MESSAGE, errorResponse, pendingResponse, storedEntryResponse } from './responses';
import { deleteRoute, fetchRoute, modelsRoute } from './routes';
import { routeFor, UnroutedModels } from './routing';
import { BrokerStore } from './store';
import { admit, type Admission } from './submit';
import { holdForResult } from './wait';
import { Wakeup } from './wakeup';

/** The answer header that says whether replicas confirmed an enqueue. */
export const REPLICATED_HEADER = 'x-ap-replicated';

/** Deprecated aliases the EPP still reads; a client must not self-assign priority through them. */
const DEPRECATED_ALIASES = ['x-gateway-inference-objective', 'x-gateway-inference-fairness-id'];

/**
 * Removes a client header server-side. The pipeline context can only stamp, so an empty value stands
 * in for removal: the EPP treats an empty objective like an absent one.
 */
function clearHeader(ctx: RequestContext, name: string): void {
  if (ctx.headers[name] !== undefined) ctx.stampHeader(name, '');
}

/**
 * `x-ap-replicated` on a 202 when replica confirmation is on: `true` once `ack_replicas` replicas
 * hold the job, `false` when the WAIT timed out or failed. The job is on the master either way,
 * so it is still a 202 (a 503 would invite a duplicate); `false` says a failover may lose it.
 */
function withReplication(r: StepResponse, a: Admission, ackReplicas: number): StepResponse {
  if (ackReplicas <= 0 || a.kind !== 'submitted' || a.replicated === undefined) return r;
  return { ...r, headers: { ...r.headers, [REPLICATED_HEADER]: String(a.replicated) } };
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

export class AsyncBrokerStep implements Step {
  readonly type = STEP_NAME;
  readonly store: BrokerStore;
  private readonly wakeup: Wakeup;
  private readonly quota: QuotaClassifier;
  private readonly unrouted = new UnroutedModels();
  private readonly backlog: QueueStats | undefined;

  constructor(
    readonly config: AsyncBrokerConfig,
    log: Logger,
  ) {
    this.store = new BrokerStore(config.redis, log, { replicas: config.ackReplicas, timeoutMs: config.ackTimeoutMs });
    this.wakeup = new Wakeup(config.wakeupMode, this.store, log);
    this.quota = new QuotaClassifier(config.quota, this.store);
    if (config.queueMetrics) this.backlog = new QueueStats(this.store, configuredQueues(config.routes, config.defaultQueue), log);
  }

  /** The routed queues' depth and oldest age, when this replica holds the reporting lease. */
  async queueStats(): Promise<readonly QueueStat[]> {
    return this.backlog ? this.backlog.collect() : [];
  }

  /** Registers `GET /v1/models`, `GET` and `DELETE /v1/requests/{id}`. */
  registerRoutes(register: StepDeps['registerRoute']): void {
    register(modelsRoute(this.config));
    register(fetchRoute(this.config, this.store));
    register(deleteRoute(this.config, this.store));
  }

  /** Connects and PINGs (5 s), then settles the wake-up mode. Rejects when Redis is unreachable. */
  async start(): Promise<void> {
    const pong = await withTimeout(
      this.store.ping().then(() => true),
      5000,
    );
    if (!pong) throw new Error('async-broker: failed to connect to Redis: PING timed out');
    await this.wakeup.effectiveMode();
  }

  /** How wait holds learn of results: keyspace notifications, or polling (resolves the `auto` probe). */
  wakeupMode(): Promise<'notify' | 'poll'> {
    return this.wakeup.effectiveMode();
  }

  /** True when Redis answers PING within `timeoutMs`. Never rejects; reported, not gating (the step fails open). */
  async ping(timeoutMs = 1000): Promise<boolean> {
    try {
      return (
        (await withTimeout(
          this.store.ping().then(() => true),
          timeoutMs,
        )) === true
      );
    } catch {
      return false;
    }
  }

  /** Closes the Redis connections. Idempotent. */
  async close(): Promise<void> {
    await this.wakeup.close();
    await this.store.close();
  }

  async execute(ctx: RequestContext): Promise<StepOutcome> {
    const raw = modeValue(ctx.headers, this.config);
    if (raw === undefined) return undefined;
    const checked = checkRequest(ctx, raw, this.config);
    if (!checked.ok) return { respond: checked.response };
    const route = routeFor(
      this.config.routes,
      { queue: this.config.defaultQueue, tier: this.config.defaultTier },
      ctx.model,
      checked.tenant,
    );
    if (!route.matched) {
      if (this.unrouted.firstSighting(ctx.model))
        ctx.log.info({ model: ctx.model }, 'async-broker: model has no route; using the defaults');
      else ctx.log.debug({ model: ctx.model }, 'async-broker: model has no route; using the defaults');
    }
    if (checked.mode === 'passthrough') {
      await this.passthrough(ctx, checked.tenant, route.tier);
      return undefined;
    }
    return { respond: await this.queued(ctx, checked.mode, checked.tenant, route) };
  }

  /** Classify, then strip and re-stamp the objective and fairness headers; the pipeline continues. */
  private async passthrough(ctx: RequestContext, tenant: string, tier: string): Promise<void> {
    const cls = await this.quota.classify(tenant, ctx.finished, ctx.log);
    const objectives = this.config.objectives.get(tier);
    const objective = objectives ? objectives[cls] : '';
    if (objective !== '') ctx.stampHeader(this.config.objectiveHeader, objective);
    else clearHeader(ctx, this.config.objectiveHeader);
    ctx.stampHeader(this.config.fairnessHeader, tenant);
    for (const alias of DEPRECATED_ALIASES) clearHeader(ctx, alias);
    ctx.log.debug({ tenant, tier, classification: cls }, 'async-broker: passthrough classified');
  }

  private async queued(
    ctx: RequestContext,
    mode: QueuedMode,
    tenant: string,
    route: { queue: string; tier: string; matched: boolean },
  ): Promise<StepResponse> {
    const id = ctx.requestId;
    const keys = requestKeys(tenant, id, this.config.keyLayout);
    const admission = await admit({ ctx, cfg: this.config, store: this.store, mode, tenant, keys, route, nowMs: Date.now() });
    switch (admission.kind) {
      case 'failed':
        ctx.log.warn({ err: admission.reason }, 'async-broker: enqueue failed');
        return errorResponse(503, 'api_error', 'ENQUEUE_FAILED', ENQUEUE_FAILED_MESSAGE, id);
      case 'stored':
        if (mode === 'enqueue') return pendingResponse(id, id);
        return this.deliverStored(ctx, keys.mailbox, admission.raw, id);
      case 'live':
      case 'submitted':
        if (admission.kind === 'submitted' && admission.replicated === false) {
          ctx.log.warn({ replicas: this.config.ackReplicas }, 'async-broker: enqueue not confirmed by the replicas; acknowledged anyway');
        }
        if (mode === 'enqueue') return withReplication(pendingResponse(id, id), admission, this.config.ackReplicas);
        return holdForResult({
          store: this.store,
          wakeup: this.wakeup,
          keys,
          db: this.config.redis.db,
          id,
          timeoutMs: admission.timeoutSeconds * 1000,
          capMs: this.config.waitCapSeconds * 1000,
          signal: ctx.signal,
          log: ctx.log,
        });
    }
  }

  /** A wait-mode retry re-attached to a stored result: deliver it and reclaim the mailbox. */
  private async deliverStored(ctx: RequestContext, mailbox: string, raw: string, id: string): Promise<StepResponse> {
    const response = storedEntryResponse(raw, id);
    if (!ctx.signal.aborted) {
      await this.store
        .deleteKey(mailbox)
        .catch((err: Error) => ctx.log.warn({ err: err.message }, 'async-broker: deleting the delivered mailbox failed'));
    }
    return response;
  }
}
