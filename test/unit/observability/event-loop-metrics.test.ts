import { Registry } from 'prom-client';
import { EVENT_LOOP_UTILIZATION, registerEventLoopUtilization } from '../../../src/observability/event-loop-metrics';
import { CoordinatorMetrics } from '../../../src/observability/metrics';

async function utilization(registry: Registry): Promise<number> {
  const metric = await registry.getSingleMetric(EVENT_LOOP_UTILIZATION)!.get();
  return metric.values[0]!.value;
}

function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* a callback that keeps the loop busy */
  }
}

describe('event-loop utilisation gauge', () => {
  // The idle window is wall time, so on a loaded CI machine a process that is runnable but not
  // scheduled (or stopped for a major GC) counts those milliseconds as busy, and one window can read
  // 1. Each attempt is a full busy-then-idle pair; a gauge that reports the process's whole life, or
  // the time since its first scrape, fails every attempt, so the retries only absorb the scheduler.
  it('reports the busy share of the time since the previous scrape', async () => {
    const registry = new Registry();
    registerEventLoopUtilization(registry);
    const attempts: Array<{ busy: number; idle: number }> = [];
    for (let attempt = 0; attempt < 5; attempt++) {
      await utilization(registry);
      busy(200);
      const busyShare = await utilization(registry);
      await new Promise((r) => setTimeout(r, 300));
      const idleShare = await utilization(registry);
      attempts.push({ busy: busyShare, idle: idleShare });
      if (busyShare > 0.8 && idleShare < 0.3) break;
    }
    const last = attempts.at(-1)!;
    expect(last.busy).toBeGreaterThan(0.8);
    expect(last.idle).toBeLessThan(0.3);
  });

  it('is in the service registry beside the lag gauges, averaged over server.workers processes', async () => {
    const metrics = new CoordinatorMetrics();
    const text = (await metrics.exposition()).body;
    expect(text).toMatch(/^# TYPE nodejs_eventloop_utilization_ratio gauge$/m);
    expect(text).toMatch(/^nodejs_eventloop_utilization_ratio (0(\.\d+)?|1)$/m);
    expect(text).toMatch(/^nodejs_eventloop_lag_p99_seconds /m);
    expect((metrics.registry.getSingleMetric(EVENT_LOOP_UTILIZATION) as unknown as { aggregator: string }).aggregator).toBe('average');
  });
});
