/**
 * Node's process metrics, tuned for a service that is idle between requests, plus the event loop's
 * utilisation.
 *
 * prom-client's event-loop-lag gauges come from `monitorEventLoopDelay`, a libuv timer that wakes the
 * loop every `precision` ms even when nothing else happens. At 100 ms that was half of an idle
 * service's CPU (about 1.2 of 2.5 ms a second), which at concurrency 1 with 0.9 s requests is a
 * millisecond of CPU per request. prom-client resets the histogram at every scrape, so the interval
 * must stay below the shortest scrape interval anyone uses (1 s, in test/e2e/prometheus.test.ts):
 * at 1000 ms a scrape could find no sample and report a NaN mean. 500 ms keeps at least one sample
 * per second for a fifth of the wake-ups of 100 ms. The lag gauges catch any stall of half a second
 * or more, and a shorter one in proportion to its length; the utilisation gauge beside them is
 * exact and costs nothing between scrapes, so saturation never depends on sampling.
 */
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { Gauge, type Registry } from 'prom-client';
import { registerDefaultProcessMetrics } from './process-metrics';

/** Sampling interval of the event-loop-delay monitor behind `nodejs_eventloop_lag_*`, ms. */
export const EVENT_LOOP_MONITORING_PRECISION_MS = 500;

export const EVENT_LOOP_UTILIZATION = 'nodejs_eventloop_utilization_ratio';

/** prom-client's default process metrics (process-metrics.ts) and the utilisation gauge, in `registry`. */
export function registerProcessMetrics(registry: Registry, precisionMs = EVENT_LOOP_MONITORING_PRECISION_MS): void {
  registerDefaultProcessMetrics(registry, precisionMs);
  registerEventLoopUtilization(registry);
}

/**
 * `nodejs_eventloop_utilization_ratio`: the share of time the event loop spent running callbacks
 * (rather than waiting in epoll) since the previous scrape; the whole life of the process on the
 * first. With `server.workers` > 1 the pod's figure is the workers' average.
 */
export function registerEventLoopUtilization(registry: Registry): void {
  let last: EventLoopUtilization | undefined;
  new Gauge({
    name: EVENT_LOOP_UTILIZATION,
    help: 'Share of time the event loop was busy (0 to 1) since the previous scrape of this registry.',
    registers: [registry],
    aggregator: 'average',
    collect() {
      const now = performance.eventLoopUtilization();
      this.set(last ? performance.eventLoopUtilization(now, last).utilization : now.utilization);
      last = now;
    },
  });
}
