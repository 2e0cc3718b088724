/**
 * prom-client's default process metrics, with its `nodejs_gc_duration_seconds` replaced by one that
 * counts every collection.
 *
 * Why: prom-client's gc metric reads only the first entry of each PerformanceObserver callback, and
 * Node hands an observer every entry queued since its last callback, so collections close together
 * arrive together: in a loop that allocates hard, 1,288 collections came in 1,014 callbacks, and that
 * metric missed a fifth of them, and their time. The replacement has the same name, help, `kind`
 * label and buckets.
 *
 * prom-client exports only `collectDefaultMetrics`, which registers all of its metrics, gc included,
 * so the others are registered here from prom-client's own modules, by the names in its
 * `metricsList` (one module per name). The lockfile pins its version;
 * test/unit/observability/process-metrics.test.ts checks that the result is the metrics
 * `collectDefaultMetrics` registers, by name.
 */
import { constants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { Histogram, collectDefaultMetrics, type Registry } from 'prom-client';

type DefaultMetric = (registry: Registry, config: { eventLoopMonitoringPrecision: number }) => void;

/** prom-client's default metrics but `gc`, by their `metricsList` names. */
export const DEFAULT_METRICS_BUT_GC: readonly string[] = collectDefaultMetrics.metricsList.filter((name) => name !== 'gc');

export const GC_DURATION = 'nodejs_gc_duration_seconds';

/** As collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision }), gc counted whole. */
export function registerDefaultProcessMetrics(registry: Registry, eventLoopMonitoringPrecision: number): void {
  for (const name of DEFAULT_METRICS_BUT_GC) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- prom-client's own module (see above)
    const register = require(`prom-client/lib/metrics/${name}`) as DefaultMetric;
    register(registry, { eventLoopMonitoringPrecision });
  }
  registerGcDuration(registry);
}

/** V8's collection kinds as Node reports them, named as prom-client names them. */
const KINDS: ReadonlyArray<readonly [number, string]> = [
  [constants.NODE_PERFORMANCE_GC_MAJOR, 'major'],
  [constants.NODE_PERFORMANCE_GC_MINOR, 'minor'],
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL, 'incremental'],
  [constants.NODE_PERFORMANCE_GC_WEAKCB, 'weakcb'],
];

/** `nodejs_gc_duration_seconds{kind}`: every collection Node reports, in seconds. */
export function registerGcDuration(registry: Registry): void {
  const histogram = new Histogram({
    name: GC_DURATION,
    help: 'Garbage collection duration by kind, one of major, minor, incremental or weakcb.',
    labelNames: ['kind'],
    buckets: [0.001, 0.01, 0.1, 1, 2, 5],
    registers: [registry],
  });
  // A child per kind, made once: a collection costs a lookup and an observe.
  const byKind = new Map(KINDS.map(([kind, name]) => [kind, histogram.labels(name)]));
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
      byKind.get(kind ?? -1)?.observe(entry.duration / 1000);
    }
  });
  observer.observe({ entryTypes: ['gc'] });
}
