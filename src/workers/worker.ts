/**
 * The worker side of `server.workers` > 1: the service runs as in a single process, but hands its
 * metrics registry to the primary (which serves `/metrics` for the pod) and drains when the primary
 * says so (the primary gets the SIGTERM).
 */
import cluster from 'node:cluster';
import type { Registry } from 'prom-client';
import { answerMetricsRequests } from './cluster-metrics';
import { isMessage, WORKER_INDEX_ENV, type DrainMessage, type StartedMessage } from './messages';

export interface WorkerRole {
  /** This worker's slot, 0..N-1, kept across restarts (the `worker` label of `epd_coordinator_worker_streams_total`). */
  readonly index: number;
  /** In place of the `/metrics` listener: the primary fetches `registry` over IPC. */
  exportMetrics(registry: Registry): void;
  /** Tells the primary the service is listening. */
  started(): void;
  /** `second`: the primary got a second signal, exit now. */
  onDrain(handler: (second: boolean) => void): void;
}

/** This process's role when it is a cluster worker; undefined in a single process or the primary. */
export function workerRole(): WorkerRole | undefined {
  if (!cluster.isWorker) return undefined;
  const index = Number.parseInt(process.env[WORKER_INDEX_ENV] ?? '', 10);
  return {
    index: Number.isInteger(index) ? index : (cluster.worker?.id ?? 0),
    exportMetrics: answerMetricsRequests,
    started: () => process.send?.({ type: 'epd:started', pid: process.pid } satisfies StartedMessage),
    onDrain: (handler) =>
      process.on('message', (message: unknown) => {
        if (isMessage<DrainMessage>(message, 'epd:drain')) handler(message.second);
      }),
  };
}
