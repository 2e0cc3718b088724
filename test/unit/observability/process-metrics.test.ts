import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { Registry, collectDefaultMetrics } from 'prom-client';
import {
  DEFAULT_METRICS_BUT_GC,
  GC_DURATION,
  registerDefaultProcessMetrics,
  registerGcDuration,
} from '../../../src/observability/process-metrics';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

async function gcCount(registry: Registry): Promise<number> {
  const metric = await registry.getSingleMetric(GC_DURATION)!.get();
  return metric.values.filter((v) => (v as { metricName?: string }).metricName === `${GC_DURATION}_count`).reduce((n, v) => n + v.value, 0);
}

/** Lets Node deliver the queued gc entries (its observers are called from the event loop). */
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 50));

describe('process metrics', () => {
  it('registers every prom-client default metric: its own modules but gc, and our gc histogram', async () => {
    expect([...DEFAULT_METRICS_BUT_GC, 'gc'].sort()).toEqual([...collectDefaultMetrics.metricsList].sort());
    const ours = new Registry();
    registerDefaultProcessMetrics(ours, 1000);
    const theirs = new Registry();
    collectDefaultMetrics({ register: theirs, eventLoopMonitoringPrecision: 1000 });
    const names = (r: Registry): string[] =>
      r
        .getMetricsAsArray()
        .map((m) => m.name)
        .sort();
    expect(names(ours)).toEqual(names(theirs));
    const help = (r: Registry): string => (r.getSingleMetric(GC_DURATION) as unknown as { help: string }).help;
    expect(help(ours)).toBe(help(theirs));
  });

  it('counts every collection, also several reported to the observer at once', async () => {
    const registry = new Registry();
    registerGcDuration(registry);
    await settle();
    const before = await gcCount(registry);
    // Ten full collections in one synchronous run: Node queues their entries and hands them to the
    // observer together, where prom-client's own gc metric counted only the first of them.
    for (let i = 0; i < 10; i++) gc();
    await settle();
    const counted = (await gcCount(registry)) - before;
    expect(counted).toBeGreaterThanOrEqual(10);
    const text = await registry.metrics();
    expect(text).toMatch(/^nodejs_gc_duration_seconds_count\{kind="major"\} \d+$/m);
  });
});
