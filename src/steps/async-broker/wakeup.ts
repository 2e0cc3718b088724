/**
 * How a wait-mode hold learns that its result landed: a keyspace
 * notification on the mailbox when the server publishes them, else polling. One shared subscriber
 * connection per step instance, one channel per waiting request.
 */
import type { Logger } from 'pino';
import type { WakeupMode } from './config';
import type { RedisClient } from './redis-client';
import type { BrokerStore } from './store';

/** Backup poll while notifications are on: they are fire-and-forget, so a lost one costs at most this. */
export const NOTIFY_BACKUP_POLL_MS = 2000;
/** Poll interval without notifications. */
export const POLL_INTERVAL_MS = 200;
const PROBE_TIMEOUT_MS = 5000;

/** True when `notify-keyspace-events` publishes list events on keyspace channels (`K` and `l` or `A`). */
export function notificationsEnabled(flags: string): boolean {
  return flags.includes('K') && (flags.includes('l') || flags.includes('A'));
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** A Redis error reply (as opposed to a connection problem): a definitive answer worth remembering. */
function isReplyError(err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError';
}

interface Channel {
  readonly listeners: Set<() => void>;
  /** Settles when SUBSCRIBE was acknowledged (or failed). */
  readonly subscribed: Promise<void>;
}

/** A registered interest in one mailbox. */
export interface Subscription {
  /** True when notifications will arrive; false means the holder should poll fast. */
  readonly live: boolean;
  close(): void;
}

export class Wakeup {
  private resolved: 'notify' | 'poll' | undefined;
  private probing: Promise<'notify' | 'poll'> | undefined;
  private subscriber: RedisClient | undefined;
  private subscriberConnect: Promise<void> | undefined;
  private readonly channels = new Map<string, Channel>();

  constructor(
    mode: WakeupMode,
    private readonly store: BrokerStore,
    private readonly log: Logger,
  ) {
    if (mode !== 'auto') this.resolved = mode;
  }

  /**
   * `auto` asks the server once (`CONFIG GET notify-keyspace-events`, never `CONFIG SET`). A refused
   * CONFIG (common on managed Redis) selects polling for good; a connection failure selects polling
   * for now and asks again next time.
   */
  async effectiveMode(): Promise<'notify' | 'poll'> {
    if (this.resolved) return this.resolved;
    this.probing ??= withTimeout(this.store.configGet('notify-keyspace-events'), PROBE_TIMEOUT_MS, 'CONFIG GET')
      .then((flags) => {
        this.resolved = flags !== undefined && notificationsEnabled(flags) ? 'notify' : 'poll';
        this.log.info({ wakeup: this.resolved, flags }, 'async-broker: wake-up mode selected');
        return this.resolved;
      })
      .catch((err: unknown) => {
        if (isReplyError(err)) {
          this.resolved = 'poll';
          this.log.info({ err: (err as Error).message }, 'async-broker: CONFIG GET refused; polling for results');
        } else {
          this.log.warn({ err: (err as Error).message }, 'async-broker: wake-up probe failed; polling for now');
        }
        return 'poll' as const;
      })
      .finally(() => {
        this.probing = undefined;
      });
    return this.probing;
  }

  /** The interval between lookups of a hold. */
  pollIntervalMs(sub: Subscription | undefined): number {
    return sub?.live ? NOTIFY_BACKUP_POLL_MS : POLL_INTERVAL_MS;
  }

  private ensureSubscriber(): RedisClient {
    if (!this.subscriber) {
      const sub = this.store.duplicate();
      sub.on('error', () => {
        // Reported by the command connection; the subscriber reconnects and resubscribes on its own.
      });
      sub.on('message', (channel: string) => {
        const ch = this.channels.get(channel);
        if (ch) for (const wake of ch.listeners) wake();
      });
      this.subscriber = sub;
    }
    return this.subscriber;
  }

  /** The subscriber, connected on first use; concurrent first holds share that one connect. */
  private connectedSubscriber(): Promise<RedisClient> {
    const sub = this.ensureSubscriber();
    if (sub.status === 'wait' && !this.subscriberConnect) {
      this.subscriberConnect = withTimeout(sub.connect(), PROBE_TIMEOUT_MS, 'subscriber connect').finally(() => {
        this.subscriberConnect = undefined;
      });
    }
    return this.subscriberConnect ? this.subscriberConnect.then(() => sub) : Promise.resolve(sub);
  }

  /**
   * Subscribes `onWake` to `channel` when notifications are in use. Never throws: on any failure
   * the subscription is not live and the holder polls at the fast interval.
   */
  async subscribe(channel: string, onWake: () => void): Promise<Subscription> {
    if ((await this.effectiveMode()) !== 'notify') return { live: false, close: () => undefined };
    let ch = this.channels.get(channel);
    if (!ch) {
      const listeners = new Set<() => void>();
      const subscribed = this.connectedSubscriber().then(async (sub) => {
        await sub.subscribe(channel);
      });
      ch = { listeners, subscribed };
      this.channels.set(channel, ch);
    }
    const entry = ch;
    entry.listeners.add(onWake);
    const close = () => {
      entry.listeners.delete(onWake);
      if (entry.listeners.size === 0 && this.channels.get(channel) === entry) {
        this.channels.delete(channel);
        const sub = this.subscriber;
        if (sub && sub.status === 'ready') {
          sub.unsubscribe(channel).catch((err: Error) => this.log.debug({ err: err.message }, 'async-broker: unsubscribe failed'));
        }
      }
    };
    try {
      await entry.subscribed;
      return { live: true, close };
    } catch (err) {
      this.log.debug({ err: (err as Error).message }, 'async-broker: subscribe failed; polling this hold');
      close();
      // A failed SUBSCRIBE must not poison later holds of the same id.
      if (this.channels.get(channel) === entry) this.channels.delete(channel);
      return { live: false, close: () => undefined };
    }
  }

  async close(): Promise<void> {
    this.channels.clear();
    this.subscriber?.disconnect();
    this.subscriber = undefined;
  }
}
