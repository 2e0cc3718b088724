/**
 * `redis_url` in go-redis syntax (`redis://user:pass@host:port/db?dial_timeout=3s`, `rediss://` for
 * TLS), turned into a target (the Sentinel and Cluster forms are in `./redis-topology.ts`). The DB
 * index is kept apart because the keyspace channel name (`__keyspace@<db>__:...`) depends on it.
 */
import type { RedisOptions } from 'ioredis';
import { parseDuration } from '../../config/duration';

export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** How the servers are found: one address, a Sentinel-managed master, or a Cluster. */
export type RedisTopology =
  | { readonly kind: 'single' }
  | {
      readonly kind: 'sentinel';
      readonly sentinels: readonly HostPort[];
      readonly masterName: string;
      readonly sentinelUsername?: string;
      readonly sentinelPassword?: string;
    }
  | { readonly kind: 'cluster'; readonly nodes: readonly HostPort[] };

export interface RedisTarget {
  readonly topology: RedisTopology;
  /** The server (single), or the first sentinel or seed node. */
  readonly host: string;
  readonly port: number;
  readonly db: number;
  readonly tls: boolean;
  readonly username?: string;
  readonly password?: string;
  /** From `dial_timeout`, ms. */
  readonly connectTimeoutMs?: number;
  /** From `read_timeout` / `write_timeout` (the larger), ms. */
  readonly commandTimeoutMs?: number;
  readonly clientName?: string;
  readonly skipVerify: boolean;
}

/** Thrown for a URL go-redis would refuse; the message is the reason. */
export class RedisUrlError extends Error {
  override readonly name = 'RedisUrlError';
}

/** go-redis options we map onto ioredis. */
const MAPPED_OPTIONS: ReadonlySet<string> = new Set(['db', 'dial_timeout', 'read_timeout', 'write_timeout', 'client_name', 'skip_verify']);
/** go-redis pool and retry tuning with no ioredis counterpart (one multiplexed connection); accepted and ignored. */
const IGNORED_OPTIONS: ReadonlySet<string> = new Set([
  'protocol',
  'max_retries',
  'min_retry_backoff',
  'max_retry_backoff',
  'pool_fifo',
  'pool_size',
  'pool_timeout',
  'min_idle_conns',
  'max_idle_conns',
  'max_active_conns',
  'conn_max_idle_time',
  'conn_max_lifetime',
  'idle_timeout',
  'idle_check_frequency',
  'max_conn_age',
]);

/** go-redis durations: a bare integer is seconds, otherwise a Go duration; `-1` and `0` mean "default". */
function durationOption(name: string, raw: string): number | undefined {
  const t = raw.trim();
  if (t === '' || t === '0' || t === '-1') return undefined;
  if (/^\d+$/.test(t)) return Number(t) * 1000;
  const ms = parseDuration(t);
  if (ms === null) throw new RedisUrlError(`invalid ${name} value: ${JSON.stringify(raw)}`);
  return ms;
}

export function dbIndex(raw: string): number {
  if (!/^\d{1,5}$/.test(raw)) throw new RedisUrlError(`invalid database number: ${JSON.stringify(raw)}`);
  return Number(raw);
}

export type MutableTarget = { -readonly [K in keyof RedisTarget]: RedisTarget[K] };

/** Applies the go-redis query options shared by every form; `extra` claims form-specific ones first. */
export function applyOptions(out: MutableTarget, params: URLSearchParams, extra?: (name: string, value: string) => boolean): void {
  for (const [name, value] of params) {
    if (extra?.(name, value)) continue;
    if (IGNORED_OPTIONS.has(name)) continue;
    if (!MAPPED_OPTIONS.has(name)) throw new RedisUrlError(`unexpected option: ${name}`);
    switch (name) {
      case 'db':
        out.db = dbIndex(value);
        break;
      case 'dial_timeout': {
        const ms = durationOption(name, value);
        if (ms !== undefined) out.connectTimeoutMs = ms;
        break;
      }
      case 'read_timeout':
      case 'write_timeout': {
        const ms = durationOption(name, value);
        if (ms !== undefined) out.commandTimeoutMs = Math.max(out.commandTimeoutMs ?? 0, ms);
        break;
      }
      case 'client_name':
        out.clientName = value;
        break;
      case 'skip_verify':
        out.skipVerify = value === 'true' || value === '1';
        break;
    }
  }
}

export function parseRedisUrl(text: string): RedisTarget {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new RedisUrlError('not a URL');
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw new RedisUrlError(
      `invalid URL scheme: ${url.protocol.replace(/:$/, '')} (expected redis, rediss, redis-sentinel, rediss-sentinel, redis-cluster or rediss-cluster)`,
    );
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1') || 'localhost';
  const port = url.port === '' ? 6379 : Number(url.port);
  const path = url.pathname.replace(/^\//, '');

  const out: MutableTarget = {
    topology: { kind: 'single' },
    host,
    port,
    db: path === '' ? 0 : dbIndex(path),
    tls: url.protocol === 'rediss:',
    skipVerify: false,
  };
  if (url.username) out.username = decodeURIComponent(url.username);
  if (url.password) out.password = decodeURIComponent(url.password);
  applyOptions(out, url.searchParams);
  return out;
}

/** Defaults follow go-redis (dial 5 s, read/write 3 s) so failures surface on a similar timescale. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5000;
export const DEFAULT_COMMAND_TIMEOUT_MS = 3000;

/**
 * ioredis options for the command connection. The offline queue is off and each command is tried
 * once, so a down Redis fails a request at once (passthrough then fails open, queued modes 503)
 * instead of parking it; the connection itself keeps reconnecting in the background.
 */
export function ioredisOptions(t: RedisTarget): RedisOptions {
  const opts: RedisOptions = {
    host: t.host,
    port: t.port,
    db: t.db,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    autoResubscribe: true,
    connectTimeout: t.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    commandTimeout: t.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS,
    // Reconnect forever, backing off to 2 s: Redis coming back must heal the step without a restart.
    retryStrategy: (times: number) => Math.min(times * 100, 2000),
  };
  if (t.username !== undefined) opts.username = t.username;
  if (t.password !== undefined) opts.password = t.password;
  if (t.clientName !== undefined) opts.connectionName = t.clientName;
  if (t.tls) opts.tls = { servername: t.host, rejectUnauthorized: !t.skipVerify };
  return opts;
}
