/** `epd_coordinator_ready` and `epd_coordinator_dependency_up` follow the health services at scrape time. */
import { HealthService } from '../../../src/observability/health';
import { registerHealthGauges } from '../../../src/observability/health-metrics';
import { silentLogger } from '../../../src/observability/logger';
import { CoordinatorMetrics } from '../../../src/observability/metrics';

const sample = (text: string, series: string): number | undefined => {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

test('ready follows the gating checks and the drain; each dependency reports on its own', async () => {
  let gate = true;
  let redis = false;
  const health = new HealthService({
    checks: [async () => gate],
    dependencies: [{ name: 'async-broker', check: async () => redis }],
    intervalMs: 10,
    log: silentLogger(),
  });
  const m = new CoordinatorMetrics({ processMetrics: false });
  registerHealthGauges(m.registry, health, ['async-broker']);
  const scrape = async () => (await m.exposition()).body;

  expect(sample(await scrape(), 'epd_coordinator_ready')).toBe(0); // before the first poll
  await health.start();
  let text = await scrape();
  expect(sample(text, 'epd_coordinator_ready')).toBe(1);
  expect(sample(text, 'epd_coordinator_dependency_up{dependency="async-broker"}')).toBe(0);

  gate = false;
  redis = true;
  await new Promise((r) => setTimeout(r, 60));
  text = await scrape();
  expect(sample(text, 'epd_coordinator_ready')).toBe(0);
  expect(sample(text, 'epd_coordinator_dependency_up{dependency="async-broker"}')).toBe(1);

  gate = true;
  await new Promise((r) => setTimeout(r, 60));
  expect(sample(await scrape(), 'epd_coordinator_ready')).toBe(1);
  health.drain();
  text = await scrape();
  expect(sample(text, 'epd_coordinator_ready')).toBe(0);
  expect(sample(text, 'epd_coordinator_dependency_up{dependency="async-broker"}')).toBe(0);
});

test('without dependencies there is no dependency series', async () => {
  const m = new CoordinatorMetrics({ processMetrics: false });
  registerHealthGauges(m.registry, new HealthService({ checks: [], log: silentLogger() }), []);
  expect((await m.exposition()).body).not.toContain('epd_coordinator_dependency_up');
});
