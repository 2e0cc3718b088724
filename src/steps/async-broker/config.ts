/**
 * The `async-broker` params (with the later upstream revision's stricter
 * validation). Decoded strictly, as upstream: unknown keys at
 * any level are rejected. Every error is a {@link ConfigError} naming the key.
 */
import { ConfigError } from '../../config/errors';
import { PIPELINE_INJECTED_PARAMS } from '../../pipeline/builder';
import type { StepParams } from '../../pipeline/step';
import type { KeyLayout } from './keys';
import { DEFAULT_COMMAND_TIMEOUT_MS, RedisUrlError, type RedisTarget } from './redis-url';
import { parseRedisTarget } from './redis-topology';

export const STEP_NAME = 'async-broker';

export type QueuedMode = 'enqueue' | 'wait';
export type WakeupMode = 'auto' | 'notify' | 'poll';

export interface ModeTimeouts {
  /** Seconds; the mode's built-in default when unset. */
  readonly defaultSeconds: number;
  /** Seconds; 0 = no clamp. */
  readonly maxSeconds: number;
}

export interface QueueRoute {
  /** `''` matches any model. */
  readonly model: string;
  /** `''` matches any tenant. */
  readonly tenant: string;
  /** `''` inherits `default_queue`. */
  readonly queue: string;
  /** `''` inherits `default_tier`. */
  readonly tier: string;
}

export interface TierObjectives {
  readonly reserved: string;
  readonly overflow: string;
}

export interface QuotaConfig {
  readonly prefix: string;
  readonly attribute: string;
  readonly limits: ReadonlyMap<string, number>;
  readonly windowSeconds: number;
}

export interface AsyncBrokerConfig {
  readonly redisUrl: string;
  readonly redis: RedisTarget;
  /** Header names, lower-case (incoming headers are lower-case). */
  readonly modeHeader: string;
  readonly tenantHeader: string;
  readonly timeoutHeader: string;
  /** As configured, for client-facing messages (`unknown X-AP-Mode value`). */
  readonly modeHeaderDisplay: string;
  readonly tenantHeaderDisplay: string;
  readonly timeouts: Readonly<Record<QueuedMode, ModeTimeouts>>;
  /** Seconds; 0 = no cap. */
  readonly waitCapSeconds: number;
  /** Seconds; 0 = delete on delivery. */
  readonly fetchGraceSeconds: number;
  readonly routes: readonly QueueRoute[];
  readonly defaultQueue: string;
  readonly defaultTier: string;
  readonly objectives: ReadonlyMap<string, TierObjectives>;
  readonly objectiveHeader: string;
  readonly fairnessHeader: string;
  readonly quota: QuotaConfig;
  /** As configured (the envelope keys them by the configured name), in order, de-duplicated case-insensitively. */
  readonly forwardHeaders: readonly string[];
  readonly wakeupMode: WakeupMode;
  /** `cluster` (hash-tagged) for a Cluster URL, else upstream's names. */
  readonly keyLayout: KeyLayout;
  /** Replicas a `WAIT` must confirm before an enqueue is acknowledged; 0 = no WAIT. */
  readonly ackReplicas: number;
  readonly ackTimeoutMs: number;
  /** Report the routed queues' depth and age (one replica at a time, by a lease in Redis). */
  readonly queueMetrics: boolean;
}

export const DEFAULT_FORWARD_HEADERS = ['x-llm-d-slo-ttft-ms', 'x-llm-d-slo-tpot-ms'] as const;
export const BUILTIN_DEFAULT_SECONDS: Readonly<Record<QueuedMode, number>> = { wait: 60, enqueue: 3600 };
export const DEFAULT_QUOTA_WINDOW_SECONDS = 300;
export const DEFAULT_FETCH_GRACE_SECONDS = 60;
export const DEFAULT_ACK_TIMEOUT_MS = 1000;

const TOP_LEVEL = new Set([
  'redis_url',
  'mode_header',
  'tenant_header',
  'timeout_header',
  'timeouts',
  'wait_cap_seconds',
  'fetch_grace_seconds',
  'routes',
  'default_queue',
  'default_tier',
  'objectives',
  'objective_header',
  'fairness_header',
  'quota',
  'forward_headers',
  'wakeup_mode',
  'ack_replicas',
  'ack_timeout_ms',
  'queue_metrics',
]);

/** RFC 9110 token: what a header name may contain. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/;

type Obj = Record<string, unknown>;

function keyName(k: string): string {
  return `${STEP_NAME}.params.${k}`;
}

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function rejectUnknown(where: string, v: Obj, allowed: ReadonlySet<string>): void {
  for (const k of Object.keys(v)) {
    if (!allowed.has(k)) {
      throw new ConfigError(keyName(where ? `${where}.${k}` : k), `no unknown field "${k}" (known: ${[...allowed].join(', ')})`);
    }
  }
}

function optObj(k: string, v: unknown): Obj | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObj(v)) throw new ConfigError(keyName(k), 'a map', v);
  return v;
}

function str(k: string, v: unknown, def: string): string {
  if (v === undefined || v === null) return def;
  if (typeof v !== 'string') throw new ConfigError(keyName(k), 'a string', v);
  return v;
}

function int(k: string, v: unknown, def: number): number {
  if (v === undefined || v === null) return def;
  if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw new ConfigError(keyName(k), 'an integer', v);
  return v;
}

function nonNegative(k: string, v: unknown, def: number): number {
  const n = int(k, v, def);
  if (n < 0) throw new ConfigError(keyName(k), 'an integer >= 0', n);
  return n;
}

/** An empty value means the default, as with Go's zero-value strings. */
function headerName(k: string, v: unknown, def: string): string {
  const name = str(k, v, '') || def;
  if (!HEADER_NAME.test(name)) throw new ConfigError(keyName(k), 'an HTTP header name', name);
  return name;
}

function parseTimeouts(v: unknown): Record<QueuedMode, ModeTimeouts> {
  const out: Record<QueuedMode, ModeTimeouts> = {
    wait: { defaultSeconds: 0, maxSeconds: 0 },
    enqueue: { defaultSeconds: 0, maxSeconds: 0 },
  };
  const m = optObj('timeouts', v);
  if (!m) return out;
  for (const [mode, entry] of Object.entries(m)) {
    if (mode !== 'enqueue' && mode !== 'wait') {
      throw new ConfigError(keyName(`timeouts.${mode}`), 'a timeouts key of enqueue or wait');
    }
    const e = optObj(`timeouts.${mode}`, entry);
    if (!e) continue;
    rejectUnknown(`timeouts.${mode}`, e, new Set(['default_seconds', 'max_seconds']));
    const def = nonNegative(`timeouts.${mode}.default_seconds`, e['default_seconds'], 0);
    const max = nonNegative(`timeouts.${mode}.max_seconds`, e['max_seconds'], 0);
    if (max > 0 && def > max) {
      throw new ConfigError(keyName(`timeouts.${mode}`), `default_seconds <= max_seconds (${def} > ${max})`);
    }
    out[mode] = { defaultSeconds: def, maxSeconds: max };
  }
  return out;
}

function parseRoutes(v: unknown): QueueRoute[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new ConfigError(keyName('routes'), 'a list of {model, tenant, queue, tier}', v);
  return v.map((entry, i) => {
    const where = `routes[${i}]`;
    const e = optObj(where, entry) ?? {};
    rejectUnknown(where, e, new Set(['model', 'tenant', 'queue', 'tier']));
    return {
      model: str(`${where}.model`, e['model'], ''),
      tenant: str(`${where}.tenant`, e['tenant'], ''),
      queue: str(`${where}.queue`, e['queue'], ''),
      tier: str(`${where}.tier`, e['tier'], ''),
    };
  });
}

function parseObjectives(v: unknown): Map<string, TierObjectives> {
  const out = new Map<string, TierObjectives>();
  const m = optObj('objectives', v);
  if (!m) return out;
  for (const [tier, entry] of Object.entries(m)) {
    const where = `objectives.${tier}`;
    const e = optObj(where, entry) ?? {};
    rejectUnknown(where, e, new Set(['reserved', 'overflow']));
    out.set(tier, { reserved: str(`${where}.reserved`, e['reserved'], ''), overflow: str(`${where}.overflow`, e['overflow'], '') });
  }
  return out;
}

function parseQuota(v: unknown): QuotaConfig {
  const m = optObj('quota', v) ?? {};
  rejectUnknown('quota', m, new Set(['prefix', 'attribute', 'limits', 'window_seconds']));
  const limits = new Map<string, number>();
  const l = optObj('quota.limits', m['limits']);
  for (const [tenant, n] of Object.entries(l ?? {})) limits.set(tenant, nonNegative(`quota.limits.${tenant}`, n, 0));
  const window = nonNegative('quota.window_seconds', m['window_seconds'], 0);
  return {
    prefix: str('quota.prefix', m['prefix'], '') || 'quota:',
    attribute: str('quota.attribute', m['attribute'], '') || 'userid',
    limits,
    windowSeconds: window > 0 ? window : DEFAULT_QUOTA_WINDOW_SECONDS,
  };
}

function parseForwardHeaders(v: unknown, banned: readonly string[]): string[] {
  // Only an absent or null value takes the default; an explicit empty list forwards nothing.
  if (v === undefined || v === null) return [...DEFAULT_FORWARD_HEADERS];
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) {
    throw new ConfigError(keyName('forward_headers'), 'a list of header names', v);
  }
  const out: string[] = [];
  for (const raw of v as string[]) {
    const name = raw.toLowerCase();
    if (banned.includes(name))
      throw new ConfigError(keyName('forward_headers'), 'header names other than the mode, objective and fairness headers', raw);
    if (!HEADER_NAME.test(raw)) throw new ConfigError(keyName('forward_headers'), 'a list of HTTP header names', raw);
    if (!out.some((h) => h.toLowerCase() === name)) out.push(raw);
  }
  return out;
}

/**
 * `ack_replicas` defaults to 1 behind Sentinel or Cluster (a failover is expected there) and to 0
 * for a plain URL. The WAIT must end before the command timeout, or the command would fail first.
 */
function parseAck(p: Obj, redis: RedisTarget): { replicas: number; timeoutMs: number } {
  const replicas = nonNegative('ack_replicas', p['ack_replicas'], redis.topology.kind === 'single' ? 0 : 1);
  const timeoutMs = nonNegative('ack_timeout_ms', p['ack_timeout_ms'], DEFAULT_ACK_TIMEOUT_MS);
  const commandMs = redis.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
  if (replicas > 0 && (timeoutMs < 1 || timeoutMs >= commandMs)) {
    throw new ConfigError(
      keyName('ack_timeout_ms'),
      `between 1 and the command timeout (${commandMs} ms, read_timeout), exclusive`,
      timeoutMs,
    );
  }
  return { replicas, timeoutMs };
}

export function parseAsyncBrokerConfig(params: StepParams): AsyncBrokerConfig {
  const p: Obj = {};
  // The pipeline's own settings reach every step; this one has no use for them.
  for (const [k, v] of Object.entries(params)) if (!PIPELINE_INJECTED_PARAMS.has(k)) p[k] = v;
  rejectUnknown('', p, TOP_LEVEL);

  const redisUrl = str('redis_url', p['redis_url'], '');
  if (redisUrl === '') throw new ConfigError(keyName('redis_url'), 'a Redis URL such as redis://127.0.0.1:6379/0 (redis_url is required)');
  let redis: RedisTarget;
  try {
    redis = parseRedisTarget(redisUrl);
  } catch (err) {
    // The URL itself may hold a password, so only the reason is echoed.
    if (err instanceof RedisUrlError)
      throw new ConfigError(keyName('redis_url'), `a redis://, rediss://, redis-sentinel:// or redis-cluster:// URL (${err.message})`);
    throw err;
  }

  const modeHeader = headerName('mode_header', p['mode_header'], 'X-AP-Mode');
  const tenantHeader = headerName('tenant_header', p['tenant_header'], 'X-Team');
  const timeoutHeader = headerName('timeout_header', p['timeout_header'], 'X-Request-Timeout-Seconds');
  const objectiveHeader = headerName('objective_header', p['objective_header'], 'x-llm-d-inference-objective').toLowerCase();
  const fairnessHeader = headerName('fairness_header', p['fairness_header'], 'x-llm-d-inference-fairness-id').toLowerCase();

  const wakeup = str('wakeup_mode', p['wakeup_mode'], '') || 'auto';
  if (wakeup !== 'auto' && wakeup !== 'notify' && wakeup !== 'poll') {
    throw new ConfigError(keyName('wakeup_mode'), 'auto, notify, or poll', wakeup);
  }
  const clustered = redis.topology.kind === 'cluster';
  // Keyspace notifications are local to the node that holds the key; one subscriber cannot see them all.
  if (clustered && wakeup === 'notify') throw new ConfigError(keyName('wakeup_mode'), 'auto or poll with a Redis Cluster', wakeup);
  const ack = parseAck(p, redis);
  const queueMetrics = p['queue_metrics'] ?? true;
  if (typeof queueMetrics !== 'boolean') throw new ConfigError(keyName('queue_metrics'), 'true or false', queueMetrics);

  return {
    redisUrl,
    redis,
    modeHeader: modeHeader.toLowerCase(),
    tenantHeader: tenantHeader.toLowerCase(),
    timeoutHeader: timeoutHeader.toLowerCase(),
    modeHeaderDisplay: modeHeader,
    tenantHeaderDisplay: tenantHeader,
    timeouts: parseTimeouts(p['timeouts']),
    waitCapSeconds: nonNegative('wait_cap_seconds', p['wait_cap_seconds'], 0),
    fetchGraceSeconds: nonNegative('fetch_grace_seconds', p['fetch_grace_seconds'], DEFAULT_FETCH_GRACE_SECONDS),
    routes: parseRoutes(p['routes']),
    defaultQueue: str('default_queue', p['default_queue'], '') || 'request-sortedset',
    defaultTier: str('default_tier', p['default_tier'], ''),
    objectives: parseObjectives(p['objectives']),
    objectiveHeader,
    fairnessHeader,
    quota: parseQuota(p['quota']),
    forwardHeaders: parseForwardHeaders(p['forward_headers'], [modeHeader.toLowerCase(), objectiveHeader, fairnessHeader]),
    wakeupMode: clustered ? 'poll' : wakeup,
    keyLayout: clustered ? 'cluster' : 'llm-d-async',
    ackReplicas: ack.replicas,
    ackTimeoutMs: ack.timeoutMs,
    queueMetrics,
  };
}
