/**
 * The async broker's backlog gauges, computed at scrape time from the steps' `queueStats()` (the
 * replica holding the reporting lease returns the queues; every other replica returns none, so
 * each queue is exported once across replicas).
 */
import { Gauge, type Registry } from 'prom-client';
import type { QueueStat } from '../pipeline/step';

export type QueueStatsSource = () => Promise<readonly QueueStat[]>;

/** Both gauges are collected in one scrape; they share one read of the store. */
const SHARED_READ_MS = 1000;

export function registerQueueGauges(registry: Registry, prefix: string, sources: readonly QueueStatsSource[]): void {
  let last: { at: number; read: Promise<QueueStat[]> } | undefined;
  const read = (): Promise<QueueStat[]> => {
    const now = performance.now();
    if (!last || now - last.at > SHARED_READ_MS) {
      last = {
        at: now,
        read: Promise.all(sources.map((s) => s().catch(() => []))).then((lists) => lists.flat()),
      };
    }
    return last.read;
  };
  new Gauge({
    name: `${prefix}async_queue_depth`,
    help: 'Jobs waiting in an async-broker queue (ZCARD). Exported by one service replica at a time (a lease in Redis).',
    labelNames: ['queue'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const s of await read()) this.labels(s.queue).set(s.depth);
    },
  });
  new Gauge({
    name: `${prefix}async_queue_oldest_age_seconds`,
    help: 'Age of the oldest waiting job of an async-broker queue (from its created time; 0 when empty). One replica at a time.',
    labelNames: ['queue'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const s of await read()) this.labels(s.queue).set(s.oldestAgeSeconds ?? 0);
    },
  });
}
