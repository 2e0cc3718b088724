/**
 * A small asynchronous processor (AP) for tests that follows llm-d-async's sorted-set contract
 * (reference async-broker.md §1.2, §1.6, §1.10, §4): ZPOPMIN by deadline, expired messages cleaned
 * up without a result, the cancellation check, dispatch over HTTP without the mode header, and the
 * result write (LPUSH ResultMessage, EXPIRE, compare-and-delete cleanup).
 *
 * Simplified against the real AP (see docs/async-broker.md): no gates or merge policies (a queue
 * may name an `inferenceObjective`, and fairness is stamped from metadata), no OTel, a short fixed
 * retry backoff, and messages are popped only when a worker is free (nothing is buffered in memory).
 */
import { request } from 'node:http';
import Redis from 'ioredis';
import { goMarshal } from '../src/steps/async-broker/go-json';
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
  readonly redisUrl: string;
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

interface Internal {
  request_token?: string;
  request_queue_name?: string;
  result_queue_name?: string;
  retry_count?: number;
  queue_id?: string;
  labels?: Record<string, string>;
}

interface RequestData {
  id: string;
  created?: number;
  deadline: number;
  payload: Record<string, unknown>;
  metadata?: Record<string, string>;
  headers?: Record<string, string>;
  endpoint?: string;
  request_queue_name?: string;
  result_queue_name?: string;
}

interface Message {
  internal: Internal;
  data: RequestData;
  kind: string;
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

type Outcome = { statusCode: number; payload: string } | { errorCode: string; errorMessage: string };

const LOOPBACK = new Set(['127.0.0.1', '::1', '[::1]', 'localhost']);

/** Go's `json.Marshal` of a generic map: sorted keys at every level, HTML-safe escaping. */
function goMarshalSorted(v: unknown): string {
  const sort = (x: unknown): unknown => {
    if (Array.isArray(x)) return x.map(sort);
    if (x && typeof x === 'object') {
      const o = x as Record<string, unknown>;
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(o).sort()) out[k] = sort(o[k]);
      return out;
    }
    return x;
  };
  return goMarshal(sort(v));
}

/** `api.ResultMessage` in Go field order with `omitempty`. */
function resultJson(id: string, o: Outcome): string {
  if ('statusCode' in o) return goMarshal({ id, status_code: o.statusCode, payload: o.payload });
  return goMarshal({ id, payload: goMarshal({ error: o.errorMessage }), error_code: o.errorCode, error_message: o.errorMessage });
}

function parseMessage(raw: string): Message | null {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return null;
  }
  if (!v || typeof v !== 'object') return null;
  const o = v as Record<string, unknown>;
  const kind = o['request_kind'];
  const data = o['data'] as RequestData | undefined;
  // The AP cannot unmarshal an unknown kind or an empty data: dropped silently.
  if ((kind !== 'redis' && kind !== 'plain') || !data || typeof data !== 'object') return null;
  if (typeof data.deadline !== 'number' || !Number.isInteger(data.deadline)) return null;
  if (typeof data.id !== 'string') return null;
  const internal = { ...((o['internal'] as Internal | undefined) ?? {}) };
  return { internal, data, kind };
}

export class TestAsyncProcessor {
  readonly dispatched: Dispatch[] = [];
  readonly results: StoredResult[] = [];
  /** Messages dropped at dequeue because their deadline had passed. */
  readonly expired: string[] = [];
  private readonly redis: Redis;
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
    this.redis = new Redis(opts.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
    this.redis.on('error', () => undefined);
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
      for (let i = 0; i < popped.length; i += 2) await this.dequeued(q, popped[i]!);
    }
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
    const work = this.work(m, q).finally(() => {
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
    await this.redis.zadd(this.retryQueue, (Date.now() + backoffMs) / 1000, member);
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

  /** LPUSH, EXPIRE when the queue sets a TTL, then the cleanup script; three attempts. */
  private async writeResult(m: Message, outcome: Outcome): Promise<void> {
    const q = this.queues.get(m.internal.queue_id ?? '') ?? this.queues.get(m.internal.request_queue_name ?? '');
    const dest = q?.resultQueueName || m.internal.result_queue_name || this.opts.resultQueueName || 'result-list';
    const json = resultJson(m.data.id, outcome);
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        const p = this.redis.pipeline().lpush(dest, json);
        if (q?.resultTtlSeconds) p.expire(dest, q.resultTtlSeconds);
        p.eval(CLEANUP_REQUEST_STATE, 2, `request-active:${m.data.id}`, `request-cancel:${m.data.id}`, m.internal.request_token ?? '');
        const replies = await p.exec();
        if (replies?.some(([err]) => err)) throw new Error('result write failed');
        this.results.push({ destination: dest, json });
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 100 * (attempt + 1)));
      }
    }
  }

  private async cleanup(id: string, token: string): Promise<void> {
    await this.redis.eval(CLEANUP_REQUEST_STATE, 2, `request-active:${id}`, `request-cancel:${id}`, token);
  }
}
