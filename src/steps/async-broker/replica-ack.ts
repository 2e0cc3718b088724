/**
 * `WAIT numreplicas timeout` after a write, so an enqueue is acknowledged only once a replica
 * holds it. Redis replicates asynchronously: without this, a master that dies right after a 202
 * takes the job with it.
 *
 * - WAIT counts the writes of the connection it runs on, so it runs on the connection that wrote:
 *   in a Cluster, routed to the key's master by a keyed command in the same pipeline.
 * - WAIT blocks its connection until it returns, and with a replica down every WAIT runs to its
 *   timeout. So WAITs are group-committed per master: one WAIT on the wire at a time, and every
 *   write acknowledged meanwhile joins the next one (a WAIT covers all earlier writes of its
 *   connection). Latency stays below two timeouts whatever the load.
 * - A WAIT sent on a fresh connection (after a reconnect or a failover) would count none of the
 *   earlier connection's writes and return at once. Any connection closing between the write and
 *   the WAIT's reply therefore makes the answer "not confirmed".
 */
import type { RedisClient } from './redis-client';
import { isCluster } from './redis-client';
import { keySlot } from './key-slot';

interface Group {
  running?: Promise<number>;
  queued?: Promise<number>;
}

export class ReplicaAck {
  private epoch = 0;
  private readonly groups = new Map<string, Group>();

  constructor(
    private readonly client: RedisClient,
    readonly replicas: number,
    readonly timeoutMs: number,
  ) {
    const bump = (): void => {
      this.epoch++;
    };
    client.on('close', bump);
    client.on('-node', bump);
    client.on('node error', bump);
  }

  /**
   * True when at least `replicas` replicas hold every write this client made to `key`'s master
   * before the call; false on a short count, an error, or a connection change.
   */
  async confirm(key: string): Promise<boolean> {
    return (await this.check(key)) === 'confirmed';
  }

  /**
   * `confirmed`; `short` when the master answered with fewer replicas (the write is on the master);
   * `broken` when the WAIT failed or a connection closed meanwhile (the write may be gone with it).
   */
  async check(key: string): Promise<'confirmed' | 'short' | 'broken'> {
    if (this.replicas <= 0) return 'confirmed';
    const epoch = this.epoch;
    let acked: number;
    try {
      acked = await this.join(this.groupFor(key), key);
    } catch {
      return 'broken';
    }
    if (this.epoch !== epoch) return 'broken';
    return acked >= this.replicas ? 'confirmed' : 'short';
  }

  private groupFor(key: string): Group {
    const c = this.client;
    const id = isCluster(c) ? (c.slots[keySlot(key)]?.[0] ?? 'unknown') : 'master';
    let g = this.groups.get(id);
    if (!g) {
      g = {};
      this.groups.set(id, g);
    }
    return g;
  }

  private join(g: Group, key: string): Promise<number> {
    if (!g.running) return this.launch(g, key);
    // The WAIT on the wire may have been sent before this write: wait for the next one.
    g.queued ??= g.running.then(
      () => this.launch(g, key),
      () => this.launch(g, key),
    );
    return g.queued;
  }

  private launch(g: Group, key: string): Promise<number> {
    g.queued = undefined;
    const p: Promise<number> = this.send(key).finally(() => {
      if (g.running === p) g.running = undefined;
    });
    g.running = p;
    return p;
  }

  private async send(key: string): Promise<number> {
    // EXISTS routes the pipeline (and so the WAIT) to the connection of the key's master.
    const replies = await this.client.pipeline().exists(key).wait(this.replicas, this.timeoutMs).exec();
    const [err, n] = replies?.[1] ?? [new Error('no reply')];
    if (err) throw err;
    return Number(n);
  }
}
