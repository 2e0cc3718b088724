/**
 * Passthrough quota classification, on the AP redis-quota
 * gate's counter (`quota:userid:<tenant>`, concurrency mode), so both sides count the same slots.
 */
import type { Logger } from 'pino';
import type { QuotaConfig } from './config';
import { quotaKey } from './keys';
import type { BrokerStore } from './store';

export type Classification = 'reserved' | 'overflow';

export class QuotaClassifier {
  constructor(
    private readonly cfg: QuotaConfig,
    private readonly store: BrokerStore,
  ) {}

  /**
   * `reserved` or `overflow`. A reserved slot is released when `done` aborts (the request's stream
   * ended) or, at the latest, after the quota window: the counter would have expired by then
   * anyway, and a slot must never leak for good if the end of a request is never reported.
   * A tenant without a positive limit is reserved with no Redis call; a Redis failure fails open
   * (reserved, nothing to release).
   */
  async classify(tenant: string, done: AbortSignal, log: Logger): Promise<Classification> {
    const limit = this.cfg.limits.get(tenant) ?? 0;
    if (limit <= 0) return 'reserved';
    const key = quotaKey(this.cfg.prefix, this.cfg.attribute, tenant);
    let reserved: boolean;
    try {
      reserved = await this.store.quotaAcquire(key, limit, this.cfg.windowSeconds);
    } catch (err) {
      log.error({ err: (err as Error).message, tenant }, 'async-broker: quota check failed; failing open as reserved');
      return 'reserved';
    }
    if (!reserved) return 'overflow';
    this.scheduleRelease(key, done, log);
    return 'reserved';
  }

  private scheduleRelease(key: string, done: AbortSignal, log: Logger): void {
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      clearTimeout(timer);
      done.removeEventListener('abort', release);
      this.store.quotaRelease(key, this.cfg.windowSeconds).catch((err: Error) => {
        log.warn({ err: err.message, key }, 'async-broker: quota release failed; the slot expires with the window');
      });
    };
    const timer = setTimeout(release, this.cfg.windowSeconds * 1000);
    timer.unref();
    if (done.aborted) release();
    else done.addEventListener('abort', release, { once: true });
  }
}
