/**
 * `/metrics` of a `server.workers` > 1 pod, served by the cluster primary: every worker's registry,
 * fetched over the cluster IPC channel at scrape time and aggregated per metric by the metric's own
 * `aggregator` (prom-client's AggregatorRegistry.aggregate: counters, histograms and most gauges sum;
 * readiness takes the minimum, the async-queue gauges the maximum). The primary adds its own
 * `process_*` figures, so CPU and memory are the pod's, and its worker gauges.
 */
import cluster from 'node:cluster';
import { AggregatorRegistry, Counter, Gauge, Registry, type Aggregator } from 'prom-client';
import type { Logger } from 'pino';
import type { MetricsSource } from '../observability/metrics-server';
import { registerDefaultProcessMetrics } from '../observability/process-metrics';
import { isMessage, type MetricsJson, type MetricsRequest, type MetricsResponse } from './messages';

/** prom-client's own metrics whose sum over processes means nothing. */
const AGGREGATOR_OVERRIDES: Readonly<Record<string, Aggregator>> = {
  // prom-client omits it across processes; the earliest is when the pod started.
  process_start_time_seconds: 'min',
  process_max_fds: 'first',
};

/** A scrape waits this long for the workers; one that has not answered is left out of that scrape (and logged). */
const WORKER_TIMEOUT_MS = 2000;

interface PendingScrape {
  readonly waiting: Set<number>;
  readonly results: MetricsJson[];
  finish(): void;
}

export class ClusterMetrics implements MetricsSource {
  /** The primary's own series: worker gauges, and (filtered to `process_*`) its process metrics. */
  private readonly own = new Registry();
  private readonly processOwn = new Registry();
  private readonly pending = new Map<number, PendingScrape>();
  private nextId = 0;
  readonly restarts: Counter;
  readonly live: Gauge;

  constructor(
    private readonly log: Logger,
    private readonly timeoutMs = WORKER_TIMEOUT_MS,
  ) {
    this.restarts = new Counter({
      name: 'epd_coordinator_worker_restarts_total',
      help: 'Workers (server.workers > 1) the primary restarted after they died unexpectedly.',
      registers: [this.own],
    });
    this.live = new Gauge({
      name: 'epd_coordinator_workers',
      help: 'Worker processes alive (server.workers > 1), as the cluster primary counts them.',
      registers: [this.own],
    });
    // Event-loop lag of an idle primary would only dilute the workers' averages: it is filtered out below.
    registerDefaultProcessMetrics(this.processOwn, 1000);
    cluster.on('message', (worker, message: unknown) => {
      if (!isMessage<MetricsResponse>(message, 'epd:metrics-response')) return;
      const scrape = this.pending.get(message.id);
      if (!scrape?.waiting.delete(worker.id)) return;
      if (message.metrics) scrape.results.push(message.metrics);
      else this.log.warn({ worker_pid: worker.process.pid, err: message.error }, 'metrics: a worker failed to collect its registry');
      if (scrape.waiting.size === 0) scrape.finish();
    });
    // A worker that exits during a scrape will not answer it.
    cluster.on('exit', (worker) => {
      for (const scrape of this.pending.values()) if (scrape.waiting.delete(worker.id) && scrape.waiting.size === 0) scrape.finish();
    });
  }

  async exposition(): Promise<{ contentType: string; body: string }> {
    const [workers, own, processOwn] = await Promise.all([
      this.fromWorkers(),
      this.own.getMetricsAsJSON(),
      this.processOwn.getMetricsAsJSON(),
    ]);
    const all = [own, processOwn.filter((m) => m.name.startsWith('process_')), ...workers].map(withOverrides);
    const aggregated = AggregatorRegistry.aggregate(all);
    return { contentType: aggregated.contentType, body: await aggregated.metrics() };
  }

  private fromWorkers(): Promise<MetricsJson[]> {
    const id = this.nextId++;
    const targets = Object.values(cluster.workers ?? {}).filter((w) => w?.isConnected() === true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.log.warn({ missing: scrape.waiting.size }, 'metrics: workers did not answer in time; this scrape leaves them out');
        scrape.finish();
      }, this.timeoutMs);
      const scrape: PendingScrape = {
        waiting: new Set(targets.map((w) => w!.id)),
        results: [],
        finish: () => {
          clearTimeout(timer);
          this.pending.delete(id);
          resolve(scrape.results);
        },
      };
      this.pending.set(id, scrape);
      const request: MetricsRequest = { type: 'epd:metrics-request', id };
      for (const w of targets) w!.send(request);
      if (scrape.waiting.size === 0) scrape.finish();
    });
  }
}

function withOverrides(metrics: MetricsJson): MetricsJson {
  return metrics.map((m) => {
    const aggregator = AGGREGATOR_OVERRIDES[m.name];
    return aggregator ? { ...m, aggregator } : m;
  });
}

/** In a worker: answers the primary's scrape requests with `registry`. */
export function answerMetricsRequests(registry: Registry): void {
  process.on('message', (message: unknown) => {
    if (!isMessage<MetricsRequest>(message, 'epd:metrics-request')) return;
    const reply = (r: MetricsResponse) => process.send?.(r);
    registry.getMetricsAsJSON().then(
      (metrics) => reply({ type: 'epd:metrics-response', id: message.id, metrics }),
      (err: unknown) => reply({ type: 'epd:metrics-response', id: message.id, error: (err as Error).message }),
    );
  });
}
