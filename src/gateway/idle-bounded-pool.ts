import type { Client, Dispatcher } from 'undici';
import { buildConnector, errors, UndiciClient, UndiciDispatcher } from './undici-core';

/** Go's `http.DefaultMaxIdleConnsPerHost`: what `max_idle_conns_per_host: 0` means upstream. */
export const GO_DEFAULT_MAX_IDLE_CONNS_PER_HOST = 2;

export interface IdleBoundedPoolOptions {
  /** Most idle connections kept; 0 means Go's default, 2. */
  readonly maxIdle: number;
  /** How long an idle connection is kept, ms. */
  readonly idleTimeoutMs: number;
  readonly connectTimeoutMs: number;
}

/** Marks the clients a pool owns and still takes back; a client that failed to connect loses it. */
const OWNER = Symbol('idle-bounded-pool');
type Owned = Client & { [OWNER]?: IdleBoundedPool };

/**
 * A keep-alive pool to one origin with no cap on connections in use and at most `maxIdle` idle
 * ones, as Go's `http.Transport` keeps them (`MaxIdleConnsPerHost`, the upstream coordinator's
 * `max_idle_conns_per_host`).
 *
 * undici's `Pool` has no idle bound: every connection a burst opens stays open until its own
 * keep-alive timer ends it, so 256 concurrent requests left about 500 sockets open for 90 s, which
 * then closed together (about 0.1 ms of CPU each: undici and Node build an error with a stack trace
 * per socket). Here a connection that comes back to a full idle list is closed at once, and idle
 * connections are reused last-in first-out, so the ones in use stay the few most recent and the
 * rest age out.
 *
 * Each connection is an undici `Client` with pipelining 1: it is in use from `dispatch` until it
 * emits 'drain' (done with its request, however that ended), as undici's own pools track it.
 */
export class IdleBoundedPool extends UndiciDispatcher {
  private readonly idle: Owned[] = [];
  private readonly clientOptions: Client.Options;
  private readonly maxIdle: number;
  private closing = false;

  constructor(
    private readonly origin: string,
    opts: IdleBoundedPoolOptions,
  ) {
    super();
    this.maxIdle = opts.maxIdle > 0 ? opts.maxIdle : GO_DEFAULT_MAX_IDLE_CONNS_PER_HOST;
    this.clientOptions = {
      // One connector for every connection, as undici's Pool shares one (and its TLS session cache).
      connect: buildConnector({ timeout: opts.connectTimeoutMs }),
      keepAliveTimeout: opts.idleTimeoutMs,
      keepAliveMaxTimeout: Math.max(opts.idleTimeoutMs, 1000),
      pipelining: 1,
    };
  }

  /** Idle connections held now (open, or closed by the peer and reopened on their next use). */
  get idleCount(): number {
    return this.idle.length;
  }

  override dispatch(opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    if (this.closing) {
      // As undici's dispatchers answer a call after close: through the handler when it can hear it.
      const err = new errors.ClientClosedError();
      if (typeof handler.onError !== 'function') throw err;
      handler.onError(err);
      return false;
    }
    const client = this.idle.pop() ?? this.open();
    const free = client.dispatch(opts, handler);
    // A queued call keeps the client until its 'drain'. Still free, or refused before it was queued
    // (invalid options), no 'drain' will come: it is idle again now.
    if (free || client.stats.size === 0) this.takeBack(client);
    return free;
  }

  private open(): Owned {
    const client: Owned = new UndiciClient(this.origin, this.clientOptions);
    client[OWNER] = this;
    client.on('drain', onDrain).on('connectionError', onConnectionError);
    return client;
  }

  /** A client is done with its call (its 'drain'): kept idle, or closed when the idle list is full. */
  takeBack(client: Owned): void {
    if (!this.closing && this.idle.length < this.maxIdle) {
      this.idle.push(client);
      return;
    }
    client[OWNER] = undefined;
    client.close().catch(ignore);
  }

  /** A client whose connection failed: dropped, even if its 'drain' already brought it back. */
  forget(client: Owned): void {
    client[OWNER] = undefined;
    const i = this.idle.indexOf(client);
    if (i >= 0) this.idle.splice(i, 1);
  }

  /** Closes the idle connections now and every other one when its call ends. */
  override async close(): Promise<void> {
    await this.shut((c) => c.close());
  }

  /** Destroys the idle connections now; one in use is closed when its call ends. */
  override async destroy(): Promise<void> {
    await this.shut((c) => c.destroy());
  }

  private async shut(end: (client: Client) => Promise<void>): Promise<void> {
    this.closing = true;
    await Promise.all(this.idle.splice(0).map((c) => end(c).catch(ignore)));
  }
}

// Shared listeners: `this` is the client that emitted.
function onDrain(this: Owned): void {
  this[OWNER]?.takeBack(this);
}

/** As undici's Pool does (nodejs/undici#3895): a client whose connection failed is not reused. */
function onConnectionError(this: Owned): void {
  this[OWNER]?.forget(this);
}

function ignore(): void {}
