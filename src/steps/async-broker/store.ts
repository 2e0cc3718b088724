/**
 * Every Redis command the step issues, on one ioredis client per step instance (plus a second one
 * for submits when they are WAITed for). Commands fail fast while Redis is unreachable (no offline
 * queue, one attempt, a command timeout); the connection heals itself in the background.
 */
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { CANCEL_TTL_SECONDS, type RequestKeys } from './keys';
import { createRedisClient, type RedisClient } from './redis-client';
import type { RedisTarget } from './redis-url';
import { ReplicaAck } from './replica-ack';
import { CLEANUP_REQUEST_STATE, MARK_CANCELLED, QUOTA_ACQUIRE, QUOTA_RELEASE, UNCANCEL } from './scripts';

/** A Lua script run as EVALSHA, falling back to EVAL when the server does not have it cached. */
export class LuaScript {
  readonly sha: string;

  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  async run(client: RedisClient, keys: readonly string[], args: ReadonlyArray<string | number>): Promise<unknown> {
    try {
      return await client.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      return client.eval(this.source, keys.length, ...keys, ...args);
    }
  }
}

const acquireScript = new LuaScript(QUOTA_ACQUIRE);
const releaseScript = new LuaScript(QUOTA_RELEASE);
const cancelScript = new LuaScript(MARK_CANCELLED);
const uncancelScript = new LuaScript(UNCANCEL);
const cleanupScript = new LuaScript(CLEANUP_REQUEST_STATE);

/** What a request id looks like in Redis right now. */
export type RequestState = { readonly kind: 'result'; readonly raw: string } | { readonly kind: 'pending' } | { readonly kind: 'unknown' };

export interface Submission {
  readonly keys: RequestKeys;
  readonly token: string;
  readonly ttlMs: number;
  readonly queue: string;
  readonly deadline: number;
  readonly member: string;
  /** Also drop a stored result in the same transaction (a retry replacing a failed outcome). */
  readonly clearMailbox: boolean;
}

/** A command or transaction Redis refused, or a connection failure. */
export class StoreError extends Error {
  override readonly name = 'StoreError';
}

/** Checks every reply of a MULTI: Redis does not roll back a transaction when one command fails. */
function checkExec(replies: [Error | null, unknown][] | null, what: string): unknown[] {
  if (replies === null) throw new StoreError(`${what}: transaction aborted`);
  return replies.map(([err, res], i) => {
    if (err) throw new StoreError(`${what}: command ${i + 1} failed: ${err.message}`);
    return res;
  });
}

/**
 * A client opened on first use. Only the first connect is awaited; afterwards a broken connection
 * makes commands fail at once while ioredis reconnects in the background.
 */
class LazyClient {
  private firstConnect: Promise<void> | undefined;
  private firstConnectSettled = false;

  constructor(
    readonly client: RedisClient,
    log: Logger,
  ) {
    // Without a listener ioredis reports every failed reconnect as an unhandled 'error' event.
    let lastLogged = 0;
    client.on('error', (err: Error) => {
      const now = Date.now();
      if (now - lastLogged > 10_000) {
        lastLogged = now;
        log.warn({ err: err.message }, 'async-broker: redis connection error');
      }
    });
  }

  async get(): Promise<RedisClient> {
    if (this.client.status === 'wait' && !this.firstConnect) {
      this.firstConnect = this.client.connect().then(
        () => {
          this.firstConnectSettled = true;
        },
        (err: Error) => {
          this.firstConnectSettled = true;
          throw new StoreError(`failed to connect to Redis: ${err.message}`);
        },
      );
    }
    if (this.firstConnect && !this.firstConnectSettled) await this.firstConnect;
    return this.client;
  }
}

export interface AckOptions {
  /** Replicas a WAIT must confirm after a submit; 0 = none. */
  readonly replicas: number;
  readonly timeoutMs: number;
}

export class BrokerStore {
  private readonly main: LazyClient;
  /**
   * Submits run on their own connection when they are WAITed for: a WAIT blocks its connection,
   * and lookups must not queue behind it.
   */
  private readonly writer: LazyClient;
  private readonly ack: ReplicaAck | undefined;
  private readonly clustered: boolean;
  private closed = false;

  constructor(
    readonly target: RedisTarget,
    log: Logger,
    ack: AckOptions = { replicas: 0, timeoutMs: 0 },
  ) {
    this.main = new LazyClient(createRedisClient(target), log);
    this.clustered = target.topology.kind === 'cluster';
    if (ack.replicas > 0) {
      this.writer = new LazyClient(createRedisClient(target), log);
      this.ack = new ReplicaAck(this.writer.client, ack.replicas, ack.timeoutMs);
    } else {
      this.writer = this.main;
    }
  }

  get client(): RedisClient {
    return this.main.client;
  }

  /** A second connection with the same settings (the keyspace subscriber). */
  duplicate(): RedisClient {
    return this.main.client.duplicate();
  }

  /** The command connection, opened on first use. */
  async conn(): Promise<RedisClient> {
    if (this.closed) throw new StoreError('redis client closed');
    return this.main.get();
  }

  async ping(): Promise<void> {
    const c = await this.conn();
    const pong = await c.ping();
    if (pong !== 'PONG') throw new StoreError(`unexpected PING reply: ${String(pong)}`);
  }

  /** `CONFIG GET <name>`; `undefined` when the server has no such parameter. */
  async configGet(name: string): Promise<string | undefined> {
    const c = await this.conn();
    const reply = (await c.config('GET', name)) as unknown;
    // The reply is a flat [name, value] array.
    if (Array.isArray(reply) && reply.length >= 2 && typeof reply[1] === 'string') return reply[1];
    return undefined;
  }

  /**
   * Producer submit: `MULTI; DEL cancel; SET active token PX ms; ZADD queue deadline member; EXEC`.
   * In a Cluster the queue lives in another slot than the request's keys, so the ZADD follows the
   * transaction instead of being part of it (marker first: the AP may pop the job at once, and a
   * result must never be followed by a `DEL mailbox`). Resolves to whether the configured replicas
   * confirmed the write, or `undefined` when no confirmation is asked for.
   */
  async submit(s: Submission): Promise<boolean | undefined> {
    if (this.closed) throw new StoreError('redis client closed');
    const c = await this.writer.get();
    const tx = c.multi();
    if (s.clearMailbox) tx.del(s.keys.mailbox);
    tx.del(s.keys.cancel);
    tx.set(s.keys.active, s.token, 'PX', s.ttlMs);
    if (!this.clustered) tx.zadd(s.queue, s.deadline, s.member);
    // A lost reply (a connection error) leaves the outcome unknown: the marker stays, so a retry
    // with the same id re-attaches instead of queueing a second copy.
    const replies = await tx.exec();
    try {
      checkExec(replies, 'submit');
      if (this.clustered) {
        await c.zadd(s.queue, s.deadline, s.member).catch((err: Error) => {
          throw err.name === 'ReplyError' ? new StoreError(`submit: ZADD failed: ${err.message}`) : err;
        });
      }
    } catch (err) {
      if (!(err instanceof StoreError)) throw err;
      // A transaction does not roll back: if the ZADD failed (e.g. WRONGTYPE) the marker is set with
      // nothing queued behind it. Take our marker back so the id does not look pending until its deadline.
      await cleanupScript.run(c, [s.keys.active, s.keys.cancel], [s.token]).catch(() => undefined);
      throw err;
    }
    if (!this.ack) return undefined;
    const confirmations = [this.ack.confirm(s.keys.active)];
    if (this.clustered) confirmations.push(this.ack.confirm(s.queue));
    return (await Promise.all(confirmations)).every(Boolean);
  }

  /**
   * Newest mailbox entry and the active marker, read in one transaction so a result written and
   * cleaned up between the two reads cannot look like an unknown id.
   */
  async lookup(keys: RequestKeys): Promise<RequestState> {
    const c = await this.conn();
    const [entries, exists] = checkExec(await c.multi().lrange(keys.mailbox, 0, 0).exists(keys.active).exec(), 'lookup');
    if (Array.isArray(entries) && entries.length > 0) return { kind: 'result', raw: String(entries[0]) };
    return exists === 1 ? { kind: 'pending' } : { kind: 'unknown' };
  }

  /** The producer's cancel: copies the live token into the cancel marker. True if something was active. */
  async cancel(keys: RequestKeys): Promise<boolean> {
    const c = await this.conn();
    return (await cancelScript.run(c, [keys.active, keys.cancel], [CANCEL_TTL_SECONDS])) === 1;
  }

  /** Clears the cancel marker only while it equals the live token. True if a cancelled copy was revived. */
  async uncancel(keys: RequestKeys): Promise<boolean> {
    const c = await this.conn();
    return (await uncancelScript.run(c, [keys.active, keys.cancel], [])) === 1;
  }

  async deleteKey(key: string): Promise<void> {
    const c = await this.conn();
    await c.del(key);
  }

  async expireKey(key: string, seconds: number): Promise<void> {
    const c = await this.conn();
    await c.expire(key, seconds);
  }

  /** 1 = reserved (counted), 0 = overflow. */
  async quotaAcquire(key: string, limit: number, windowSeconds: number): Promise<boolean> {
    const c = await this.conn();
    return (await acquireScript.run(c, [key], [limit, windowSeconds])) === 1;
  }

  async quotaRelease(key: string, windowSeconds: number): Promise<void> {
    const c = await this.conn();
    await releaseScript.run(c, [key], [windowSeconds]);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.main.client.disconnect();
    if (this.writer !== this.main) this.writer.client.disconnect();
  }
}
