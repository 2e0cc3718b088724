/**
 * A small asynchronous processor (AP) for tests that follows llm-d-async's sorted-set contract
 * (its Redis producer and processor code): ZPOPMIN by deadline, expired messages cleaned
 * up without a result, the cancellation check, dispatch over HTTP without the mode header, and the
 * result write (LPUSH ResultMessage, EXPIRE, compare-and-delete cleanup).
 *
 * Simplified against the real AP (see docs/async-broker.md): no gates or merge policies (a queue
 * may name an `inferenceObjective`, and fairness is stamped from metadata), no OTel, a short fixed
 * retry backoff, and messages are popped only when a worker is free (nothing is buffered in memory).
 */
import { request } from 'node:http';
import { goMarshalSorted, parseMessage, resultJson, type Message, type Outcome } from './async-messages';
import { createRedisClient, type RedisClient } from '../src/steps/async-broker/redis-client';
import { parseRedisTarget } from '../src/steps/async-broker/redis-topology';
import { ReplicaAck } from '../src/steps/async-broker/replica-ack';
import { CLEANUP_REQUEST_STATE } from '../src/steps/async-broker/scripts';

export interface ApQueue {
  readonly queueName: string;
  /** Where dispatches go; loopback only. */
  readonly igwBaseUrl: string;
  /** Used when the envelope has no `endpoint`. Default `/v1/completions`. */
  readonly requestPathUrl?: string;
  /** EXPIRE on the result destination after each push. */
  readonly resultTtlSeconds?: number;
  /** Overrides the per-message destination (queues fed by the step must not set it). */
  readonly resultQueueName?: string;
  readonly labels?: Record<string, string>;
  /** Sent as `x-gateway-inference-objective`. */
  readonly inferenceObjective?: string;
}

export interface ApOptions {
  /** Any `redis_url` form the step accepts (plain, Sentinel, Cluster). */
  readonly redisUrl: string;
  /**
   * Replicas a `WAIT` must confirm after each pop and each result write (0, the default, as the
   * real AP: none). See {@link TestAsyncProcessor.claim} for what an unconfirmed pop does.
   */
  readonly ackReplicas?: number;
  readonly ackTimeoutMs?: number;
  readonly queues: readonly ApQueue[];
  readonly pollIntervalMs?: number;
  readonly batchSize?: number;
  readonly concurrency?: number;
  /** Global fallback destination. Default `result-list`. */
  readonly resultQueueName?: string;
  readonly retryQueueName?: string;
  /** Per-attempt limit (`--request-timeout`). Default 5 min. */
  readonly requestTimeoutMs?: number;
  /** Backoff before a retryable (429/5xx) message is due again. Default 200 ms. */
  readonly retryBackoffMs?: number;
  readonly fairnessHeader?: string;
  readonly fairnessAttribute?: string;
}

export interface Dispatch {
  readonly id: string;
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly body: string;
}

export interface StoredResult {
  readonly destination: string;
  readonly json: string;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', '[::1]', 'localhost']);

/** Runs `fn` until it resolves, backing off 100, 200, ... ms (at most 1 s), for about `budgetMs`. */
async function retrying<T>(fn: () => Promise<T>, budgetMs: number): Promise<T> {
  const end = Date.now() + budgetMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() >= end) throw err;
      await new Promise((r) => setTimeout(r, Math.min(100 * attempt, 1000)));
    }
  }
}

export class TestAsyncProcessor {
  readonly dispatched: Dispatch[] = [];
  readonly results: StoredResult[] = [];
  /** Messages dropped at dequeue because their deadline had passed. */
  readonly expired: string[] = [];
  /** Popped messages dropped because a failover left it unknown whether the pop was ours. */
  readonly unclaimed: string[] = [];
  /** Messages given up after they were taken: the retry queue could not be written, even through a failover. */
  readonly dropped: string[] = [];
  private readonly redis: RedisClient;
  private readonly ack: ReplicaAck | undefined;
  private readonly queues = new Map<string, ApQueue>();
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private busy = 0;
  private readonly inflight = new Set<Promise<void>>();
  private ticking: Promise<void> | undefined;

  constructor(private readonly opts: ApOptions) {
    for (const q of opts.queues) {
      const host = new URL(q.igwBaseUrl).hostname;
      if (!LOOPBACK.has(host)) throw new Error(`test AP dispatches to loopback only, got ${q.igwBaseUrl}`);
      this.queues.set(q.queueName, q);
    }
    this.redis = createRedisClient(parseRedisTarget(opts.redisUrl), {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: true,
      autoResendUnfulfilledCommands: false,
      commandTimeout: Math.max(3000, (opts.ackTimeoutMs ?? 1000) * 3),
    });
    this.redis.on('error', () => undefined);
    if ((opts.ackReplicas ?? 0) > 0) this.ack = new ReplicaAck(this.redis, opts.ackReplicas ?? 0, opts.ackTimeoutMs ?? 1000);
  }

  private get retryQueue(): string {
    return this.opts.retryQueueName ?? 'retry-sortedset';
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    const loop = () => {
      if (!this.running) return;
      this.ticking = this.tick()
        .catch(() => undefined)
        .finally(() => {
          if (this.running) this.timer = setTimeout(loop, this.opts.pollIntervalMs ?? 50);
        });
    };
    loop();
  }

  /** Stops polling and waits for in-flight messages to finish. */
  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    await this.ticking;
    await Promise.allSettled([...this.inflight]);
  }

  async close(): Promise<void> {
    await this.stop();
    this.redis.disconnect();
  }

  /** One poll cycle over every queue; resolves when the messages it started are done. */
  async runOnce(): Promise<void> {
    await this.tick();
    await Promise.allSettled([...this.inflight]);
  }

  private async tick(): Promise<void> {
    if (this.redis.status === 'wait') await this.redis.connect();
    await this.moveDueRetries();
    for (const q of this.queues.values()) {
      const free = Math.min(this.opts.batchSize ?? 10, (this.opts.concurrency ?? 8) - this.busy);
      if (free <= 0) return;
      const popped = (await this.redis.zpopmin(q.queueName, free)) as string[];
      const members: string[] = [];
      for (let i = 0; i < popped.length; i += 2) members.push(popped[i]!);
      for (const member of await this.claim(q.queueName, members)) await this.dequeued(q, member);
    }
  }

  /**
   * With `ackReplicas`, a pop counts only once a replica has it too: otherwise a promoted replica
   * would serve the message again (run twice). When the WAIT broke (a failover), each message is
   * removed again on whatever master now serves the queue: removed = ours; already gone = the pop
   * survived the failover or another consumer has it, and at-most-once drops it. A short count
   * with the master still there dispatches (the pop is on that master).
   */
  private async claim(queue: string, members: string[]): Promise<string[]> {
    if (!this.ack || members.length === 0) return members;
    if ((await this.ack.check(queue)) !== 'broken') return members;
    const ours: string[] = [];
    for (const member of members) {
      const removed = await retrying(() => this.redis.zrem(queue, member), 15_000).catch(() => 0);
      if (removed === 1) ours.push(member);
      else this.unclaimed.push(parseMessage(member)?.data.id ?? '?');
    }
    return ours;
  }

  /** The retry mover: due retries go back to their origin queue, scored by deadline. */
  private async moveDueRetries(): Promise<void> {
    const due = await this.redis.zrangebyscore(this.retryQueue, '-inf', Date.now() / 1000, 'LIMIT', 0, 10);
    for (const member of due) {
      if ((await this.redis.zrem(this.retryQueue, member)) !== 1) continue; // another mover won
      const m = parseMessage(member);
      if (!m) continue;
      await this.redis.zadd(m.internal.request_queue_name ?? '', m.data.deadline, member);
    }
  }

  private async dequeued(q: ApQueue, raw: string): Promise<void> {
    const m = parseMessage(raw);
    if (!m) return;
    const token = m.internal.request_token ?? '';
    if (m.data.deadline < Math.floor(Date.now() / 1000)) {
      this.expired.push(m.data.id);
      await this.cleanup(m.data.id, token);
      return;
    }
    m.internal.request_queue_name ??= q.queueName;
    m.internal.queue_id ??= q.queueName;
    if (q.labels) m.internal.labels = { ...(m.internal.labels ?? {}), ...q.labels };
    let cancelled = false;
    try {
      cancelled = await this.isCancelled(m.data.id, token);
    } catch {
      // Best effort at dequeue: the worker checks again.
    }
    if (cancelled) {
      await this.writeResult(m, { errorCode: 'CANCELLED', errorMessage: 'cancelled' });
      return;
    }
    this.busy++;
    // A job that cannot be handed back (Redis gone for longer than a failover) is lost, and counted
    // as such; it must not become an unhandled rejection, which ends the process running the test.
    const work = this.work(m, q)
      .catch(() => {
        this.dropped.push(m.data.id);
      })
      .finally(() => {
        this.busy--;
        this.inflight.delete(work);
      });
    this.inflight.add(work);
  }

  private async isCancelled(id: string, token: string): Promise<boolean> {
    if (token === '') return false;
    return (await this.redis.get(`request-cancel:${id}`)) === token;
  }

  private async work(m: Message, q: ApQueue): Promise<void> {
    try {
      if (await this.isCancelled(m.data.id, m.internal.request_token ?? '')) {
        return await this.writeResult(m, { errorCode: 'CANCELLED', errorMessage: 'cancelled' });
      }
    } catch {
      // Fail closed: requeue with a short backoff.
      return await this.retryLater(m, 1000);
    }
    if (m.data.deadline <= 0) return this.writeResult(m, { errorCode: 'INVALID_REQUEST', errorMessage: 'deadline is required' });
    if (m.data.deadline < Math.floor(Date.now() / 1000)) {
      return this.writeResult(m, { errorCode: 'DEADLINE_EXCEEDED', errorMessage: 'deadline exceeded' });
    }
    // Re-checked right before the send, as the real worker does.
    if (await this.isCancelled(m.data.id, m.internal.request_token ?? '').catch(() => false)) {
      return this.writeResult(m, { errorCode: 'CANCELLED', errorMessage: 'cancelled' });
    }
    const outcome = await this.dispatch(m, q);
    if ('retry' in outcome) {
      const backoff = this.opts.retryBackoffMs ?? 200;
      if (Date.now() + backoff < m.data.deadline * 1000) return this.retryLater(m, backoff);
      return this.writeResult(m, outcome.last);
    }
    return this.writeResult(m, outcome);
  }

  private async retryLater(m: Message, backoffMs: number): Promise<void> {
    m.internal.retry_count = (m.internal.retry_count ?? 0) + 1;
    const member = JSON.stringify({ internal: m.internal, request_kind: m.kind, data: m.data });
    // Through a failover too: the ZADD meets MaxRetriesPerRequestError while Sentinel promotes.
    await retrying(() => this.redis.zadd(this.retryQueue, (Date.now() + backoffMs) / 1000, member), this.ack ? 15_000 : 600);
  }

  private headersFor(m: Message, q: ApQueue): Record<string, string> {
    const h: Record<string, string> = { 'content-type': 'application/json' };
    if (q.inferenceObjective) h['x-gateway-inference-objective'] = q.inferenceObjective;
    for (const [k, v] of Object.entries(m.data.headers ?? {})) h[k.toLowerCase()] = v;
    const fairnessHeader = (this.opts.fairnessHeader ?? 'x-llm-d-inference-fairness-id').toLowerCase();
    const fairness = m.data.metadata?.[this.opts.fairnessAttribute ?? 'userid'];
    if (fairnessHeader && fairness && Buffer.byteLength(fairness) <= 256) h[fairnessHeader] = fairness;
    return h;
  }

  private dispatch(m: Message, q: ApQueue): Promise<Outcome | { retry: true; last: Outcome }> {
    const url = new URL(m.data.endpoint || q.requestPathUrl || '/v1/completions', q.igwBaseUrl).toString();
    const headers = this.headersFor(m, q);
    const body = goMarshalSorted(m.data.payload);
    this.dispatched.push({ id: m.data.id, url, headers, body });
    const budget = Math.min(this.opts.requestTimeoutMs ?? 300_000, m.data.deadline * 1000 - Date.now());
    return new Promise((resolve) => {
      let timedOut = false;
      const req = request(url, { method: 'POST', headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => {
          clearTimeout(timer);
          const status = res.statusCode ?? 0;
          const outcome: Outcome = { statusCode: status, payload: Buffer.concat(parts).toString('utf8') };
          resolve(status === 429 || status >= 500 ? { retry: true, last: outcome } : outcome);
        });
        res.on('error', () => undefined);
      });
      const timer = setTimeout(
        () => {
          timedOut = true;
          req.destroy(new Error('deadline'));
        },
        Math.max(0, budget),
      );
      req.on('error', (err) => {
        clearTimeout(timer);
        if (timedOut) resolve({ errorCode: 'DEADLINE_EXCEEDED', errorMessage: 'request deadline exceeded' });
        else resolve({ errorCode: 'INFERENCE_ERROR', errorMessage: `Failed to send request to inference: ${err.message}` });
      });
      req.end(body);
    });
  }

  /**
   * LPUSH, EXPIRE when the queue sets a TTL, then the cleanup script; three attempts (with
   * `ackReplicas`, until a WAIT did not break, for up to 15 s: a failover must not lose a result).
   */
  private async writeResult(m: Message, outcome: Outcome): Promise<void> {
    const q = this.queues.get(m.internal.queue_id ?? '') ?? this.queues.get(m.internal.request_queue_name ?? '');
    const dest = q?.resultQueueName || m.internal.result_queue_name || this.opts.resultQueueName || 'result-list';
    const json = resultJson(m.data.id, outcome);
    const write = async (): Promise<void> => {
      const p = this.redis.pipeline().lpush(dest, json);
      if (q?.resultTtlSeconds) p.expire(dest, q.resultTtlSeconds);
      p.eval(CLEANUP_REQUEST_STATE, 2, `request-active:${m.data.id}`, `request-cancel:${m.data.id}`, m.internal.request_token ?? '');
      const replies = await p.exec();
      if (replies?.some(([err]) => err)) throw new Error('result write failed');
      if (this.ack && (await this.ack.check(dest)) === 'broken') throw new Error('result write not confirmed');
    };
    try {
      await retrying(write, this.ack ? 15_000 : 600);
      this.results.push({ destination: dest, json });
    } catch {
      // Given up: the marker expires at the deadline and GET answers 410.
    }
  }

  private async cleanup(id: string, token: string): Promise<void> {
    await this.redis.eval(CLEANUP_REQUEST_STATE, 2, `request-active:${id}`, `request-cancel:${id}`, token);
  }
}
