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
  it('reports the busy share of the time since the previous scrape', async () => {
    const registry = new Registry();
    registerEventLoopUtilization(registry);
    await utilization(registry);
    busy(200);
    expect(await utilization(registry)).toBeGreaterThan(0.8);
    await new Promise((r) => setTimeout(r, 300));
    expect(await utilization(registry)).toBeLessThan(0.3);
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
