/**
 * Replicated Redis topologies for the failover tests, built from real redis-server processes on
 * loopback (free ports, temp dirs, no persistence): a master with one replica watched by three
 * sentinels, and a cluster of three masters with one replica each. Timeouts are short so a
 * failover takes a few seconds.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type Redis from 'ioredis';
import { keySlot } from '../../src/steps/async-broker/key-slot';
import { waitUntil } from '../../launch/ports';
import { RedisServer } from './redis';

const run = promisify(execFile);
export const REDIS_CLI_BIN = process.env['REDIS_CLI_BIN'] ?? '/usr/bin/redis-cli';

async function withClient<T>(server: RedisServer, fn: (c: Redis) => Promise<T>): Promise<T> {
  const c = server.client();
  try {
    return await fn(c);
  } finally {
    c.disconnect();
  }
}

/** `INFO replication` as a map. */
export async function replicationInfo(server: RedisServer): Promise<Record<string, string>> {
  const text = await withClient(server, (c) => c.info('replication'));
  const out: Record<string, string> = {};
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1);
  }
  return out;
}

export interface SentinelSetOptions {
  readonly masterName?: string;
  /** `down-after-milliseconds`. Default 1000. */
  readonly downAfterMs?: number;
}

export class RedisSentinelSet {
  private constructor(
    readonly masterName: string,
    readonly master: RedisServer,
    readonly replica: RedisServer,
    readonly sentinels: readonly RedisServer[],
    private readonly confDirs: readonly string[],
  ) {}

  static async start(opts: SentinelSetOptions = {}): Promise<RedisSentinelSet> {
    const name = opts.masterName ?? 'mymaster';
    const master = await RedisServer.start();
    const replica = await RedisServer.start({ extraArgs: ['--replicaof', '127.0.0.1', String(master.port)] });
    const confDirs: string[] = [];
    const sentinels: RedisServer[] = [];
    for (let i = 0; i < 3; i++) {
      const dir = mkdtempSync(join(tmpdir(), 'epd-sentinel-'));
      confDirs.push(dir);
      const conf = join(dir, 'sentinel.conf');
      writeFileSync(
        conf,
        [
          `sentinel monitor ${name} 127.0.0.1 ${master.port} 2`,
          `sentinel down-after-milliseconds ${name} ${opts.downAfterMs ?? 1000}`,
          `sentinel failover-timeout ${name} 5000`,
          `sentinel parallel-syncs ${name} 1`,
          '',
        ].join('\n'),
      );
      sentinels.push(await RedisServer.start({ leadingArgs: [conf, '--sentinel'] }));
    }
    const set = new RedisSentinelSet(name, master, replica, sentinels, confDirs);
    await set.waitSettled([master.port], 20_000);
    return set;
  }

  /** `redis-sentinel://127.0.0.1:<s1>,127.0.0.1:<s2>,127.0.0.1:<s3>/<name>` */
  url(): string {
    return `redis-sentinel://${this.sentinels.map((s) => `127.0.0.1:${s.port}`).join(',')}/${this.masterName}`;
  }

  /** The port every sentinel names as the master. */
  async masterPort(): Promise<number | undefined> {
    const ports = await Promise.all(
      this.sentinels.map((s) =>
        withClient(s, async (c) => {
          const addr = (await c.call('SENTINEL', 'get-master-addr-by-name', this.masterName)) as string[] | null;
          return addr ? Number(addr[1]) : undefined;
        }).catch(() => undefined),
      ),
    );
    return ports.every((p) => p === ports[0]) ? ports[0] : undefined;
  }

  /** Until every sentinel names `port` as the master. */
  async waitPromoted(port: number, timeoutMs: number): Promise<void> {
    await waitUntil(async () => (await this.masterPort()) === port, `the sentinels to promote ${port}`, timeoutMs, 50);
  }

  /** Until the sentinels agree on a master among `ports`, know each other, and it has a replica online. */
  async waitSettled(ports: readonly number[], timeoutMs: number): Promise<number> {
    let master: number | undefined;
    await waitUntil(
      async () => {
        master = await this.masterPort();
        if (master === undefined || !ports.includes(master)) return false;
        for (const s of this.sentinels) {
          const fields: string[] = await withClient(s, (c) => c.call('SENTINEL', 'master', this.masterName) as Promise<string[]>).catch(
            () => [],
          );
          const get = (k: string) => fields[fields.indexOf(k) + 1];
          if (get('num-other-sentinels') !== '2' || get('flags') !== 'master') return false;
        }
        const node = [this.master, this.replica].find((n) => n.port === master)!;
        const info = await replicationInfo(node).catch(() => ({}) as Record<string, string>);
        return info['role'] === 'master' && info['connected_slaves'] === '1' && /state=online/.test(info['slave0'] ?? '');
      },
      `the sentinels to settle on one of ${ports.join(', ')} with a replica online`,
      timeoutMs,
      100,
    );
    return master!;
  }

  async destroy(): Promise<void> {
    await Promise.all([this.master, this.replica, ...this.sentinels].map((s) => s.destroy()));
    for (const d of this.confDirs) rmSync(d, { recursive: true, force: true });
  }
}

export interface ClusterSetOptions {
  /** `cluster-node-timeout`. Default 1000. */
  readonly nodeTimeoutMs?: number;
}

/** Three masters and three replicas, slots spread by `redis-cli --cluster create`. */
export class RedisClusterSet {
  private constructor(readonly nodes: readonly RedisServer[]) {}

  static async start(opts: ClusterSetOptions = {}): Promise<RedisClusterSet> {
    const args = [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      'nodes.conf',
      '--cluster-node-timeout',
      String(opts.nodeTimeoutMs ?? 1000),
      // Other slots keep serving while one master fails over; a replica takes over however stale.
      '--cluster-require-full-coverage',
      'no',
      '--cluster-replica-validity-factor',
      '0',
    ];
    const nodes = await Promise.all(Array.from({ length: 6 }, () => RedisServer.start({ extraArgs: args })));
    const set = new RedisClusterSet(nodes);
    try {
      await run(
        REDIS_CLI_BIN,
        ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '1', '--cluster-yes'],
        { timeout: 30_000 },
      );
      await set.waitHealthy(30_000);
    } catch (err) {
      await set.destroy();
      throw err;
    }
    return set;
  }

  /** `redis-cluster://` with every node as a seed. */
  url(): string {
    return `redis-cluster://${this.nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`;
  }

  /** Until every running node says `cluster_state:ok`, and every master has a replica online. */
  async waitHealthy(timeoutMs: number): Promise<void> {
    await waitUntil(
      async () => {
        const live = this.nodes.filter((n) => n.running);
        for (const n of live) {
          const info = await withClient(n, (c) => c.call('CLUSTER', 'INFO') as Promise<string>).catch(() => '');
          if (!info.includes('cluster_state:ok')) return false;
          const repl = await replicationInfo(n).catch(() => ({}) as Record<string, string>);
          if (repl['role'] === 'master' && !/state=online/.test(repl['slave0'] ?? '')) return false;
        }
        return (await this.masters()).length === 3;
      },
      'the cluster to be healthy',
      timeoutMs,
      100,
    );
  }

  /** Running nodes whose role is master. */
  async masters(): Promise<RedisServer[]> {
    const out: RedisServer[] = [];
    for (const n of this.nodes.filter((x) => x.running)) {
      if ((await replicationInfo(n).catch(() => ({}) as Record<string, string>))['role'] === 'master') out.push(n);
    }
    return out;
  }

  /** The running master that serves `key`'s slot, as the cluster sees it. */
  async masterFor(key: string): Promise<RedisServer | undefined> {
    const slot = keySlot(key);
    for (const n of this.nodes.filter((x) => x.running)) {
      const slots = (await withClient(n, (c) => c.call('CLUSTER', 'SLOTS') as Promise<[number, number, [string, number]][]>).catch(
        () => [],
      )) as [number, number, [string, number, ...unknown[]]][];
      for (const [from, to, [, port]] of slots) {
        if (slot >= from && slot <= to) return this.nodes.find((x) => x.port === Number(port) && x.running);
      }
    }
    return undefined;
  }

  /** `CLUSTER KEYSLOT`, the server's own answer (to check our hash-tag layout against). */
  async serverKeySlot(key: string): Promise<number> {
    const n = this.nodes.find((x) => x.running)!;
    return withClient(n, (c) => c.call('CLUSTER', 'KEYSLOT', key) as Promise<number>);
  }

  async destroy(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.destroy()));
  }
}
