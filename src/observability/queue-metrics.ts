/**
 * The async broker's backlog gauges, computed at scrape time from the steps' `queueStats()` (the
 * replica holding the reporting lease returns the queues; every other replica returns none, so
 * each queue is exported once across replicas).
 */
import { Gauge, type Registry } from 'prom-client';
import type { QueueStat } from '../pipeline/step';

export type QueueStatsSource = () => Promise<readonly QueueStat[]>;

export function registerQueueGauges(registry: Registry, prefix: string, sources: readonly QueueStatsSource[]): void {
  // A scrape collects both gauges at once: they share the read in flight, and the next scrape reads afresh.
  let inflight: Promise<QueueStat[]> | undefined;
  const read = (): Promise<QueueStat[]> =>
    (inflight ??= Promise.all(sources.map((s) => s().catch(() => [])))
      .then((lists) => lists.flat())
      .finally(() => {
        inflight = undefined;
      }));
  new Gauge({
    name: `${prefix}async_queue_depth`,
    help: 'Jobs waiting in an async-broker queue (ZCARD). Exported by one service replica at a time (a lease in Redis).',
    labelNames: ['queue'],
    registers: [registry],
    // Each server.workers process is a replica of its own for the lease: never add two reports up.
    aggregator: 'max',
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
    // Each server.workers process is a replica of its own for the lease: never add two reports up.
    aggregator: 'max',
    async collect() {
      this.reset();
      for (const s of await read()) this.labels(s.queue).set(s.oldestAgeSeconds ?? 0);
    },
  });
}
