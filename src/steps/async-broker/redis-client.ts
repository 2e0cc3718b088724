/**
 * One ioredis client for any topology: a plain connection, a Sentinel-managed master (ioredis asks
 * the sentinels for the master and follows a promotion), or a Cluster (ioredis follows MOVED and a
 * failover's new slot map). The step, its subscriber and the test processor all build theirs here.
 */
import type * as IORedis from 'ioredis';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { ioredisOptions, type RedisTarget } from './redis-url';

export type RedisClient = Redis | Cluster;

/**
 * ioredis, required on the first client: the step registry loads every step type, and only a
 * pipeline with the async broker needs Redis (ioredis's 40 modules are about 1 MB of heap in
 * every other service).
 */
let ioredis: typeof IORedis | undefined;
// eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded on first use (above)
const loadIORedis = (): typeof IORedis => (ioredis ??= require('ioredis') as typeof IORedis);

const backoff = (times: number): number => Math.min(times * 100, 2000);

/** The client for `t`, lazily connected; `overrides` adjust the command-connection defaults. */
export function createRedisClient(t: RedisTarget, overrides: RedisOptions = {}): RedisClient {
  const { Redis, Cluster } = loadIORedis();
  const base: RedisOptions = { ...ioredisOptions(t), ...overrides };
  const topology = t.topology;
  // Each server of a multi-host target has its own name, so TLS cannot pin the first host's.
  if (topology.kind !== 'single' && t.tls) base.tls = { rejectUnauthorized: !t.skipVerify };
  switch (topology.kind) {
    case 'single':
      return new Redis(base);
    case 'sentinel': {
      const { host: _host, port: _port, ...rest } = base;
      return new Redis({
        ...rest,
        sentinels: topology.sentinels.map((n) => ({ host: n.host, port: n.port })),
        name: topology.masterName,
        sentinelUsername: topology.sentinelUsername,
        sentinelPassword: topology.sentinelPassword,
        enableTLSForSentinelMode: t.tls,
        // No `failoverDetector`: under a failover test it left a client stuck connecting for good
        // (its +switch-master disconnect raced a reconnect). A dead master's closed connection
        // makes ioredis ask the sentinels again anyway.
        sentinelRetryStrategy: backoff,
        sentinelCommandTimeout: t.connectTimeoutMs ?? base.connectTimeout,
      });
    }
    case 'cluster': {
      const { host: _host, port: _port, db: _db, lazyConnect: _lazy, enableOfflineQueue, retryStrategy: _retry, ...nodeOptions } = base;
      return new Cluster(
        topology.nodes.map((n) => ({ host: n.host, port: n.port })),
        {
          lazyConnect: true,
          enableOfflineQueue: enableOfflineQueue ?? false,
          redisOptions: nodeOptions,
          scaleReads: 'master',
          clusterRetryStrategy: backoff,
          // During a failover the slot's master is gone until a replica takes over (node timeout + election).
          retryDelayOnFailover: 200,
          retryDelayOnClusterDown: 200,
          retryDelayOnTryAgain: 100,
          maxRedirections: 16,
          slotsRefreshTimeout: 2000,
        },
      );
    }
  }
}

export function isCluster(c: RedisClient): c is Cluster {
  return c instanceof loadIORedis().Cluster;
}
