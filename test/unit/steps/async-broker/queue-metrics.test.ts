/**
 * The backlog gauges against a real Redis: two service replicas on one Redis, one exporting each
 * queue (the lease holder), with the depth and the oldest job's age the queue really has.
 */
import { TestAsyncProcessor } from '../../../../launch/async-processor';
import { CoordinatorMetrics } from '../../../../src/observability/metrics';
import { QUEUE_METRICS_LEASE_KEY } from '../../../../src/steps/async-broker/queue-stats';
import type { AsyncBrokerStep } from '../../../../src/steps/async-broker';
import { build, request, respond, useRedis } from './harness';

const db = useRedis();

/** A replica's scrape: the backlog series as `{name{queue}: value}`. */
async function scrape(step: AsyncBrokerStep): Promise<Record<string, number>> {
  const metrics = new CoordinatorMetrics({ processMetrics: false });
  metrics.watchQueues([() => step.queueStats()]);
  const { body } = await metrics.exposition();
  const out: Record<string, number> = {};
  for (const m of body.matchAll(/^(epd_coordinator_async_queue_\w+)\{queue="([^"]+)"\} (\S+)$/gm)) out[`${m[1]}{${m[2]}}`] = Number(m[3]);
  return out;
}

const params = {
  wakeup_mode: 'poll',
  routes: [{ model: 'batch-model', queue: 'batch-queue' }],
};

async function enqueue(step: AsyncBrokerStep, id: string, model: string): Promise<void> {
  const headers = { 'x-ap-mode': 'enqueue', 'x-team': 'acme', 'x-request-id': id };
  const r = await respond(step, request({ headers, body: { model, messages: [{ role: 'user', content: id }] } }).ctx);
  expect(r.status).toBe(202);
}

test('one replica exports each routed queue with its depth and the age of its oldest job; the other exports none', async () => {
  const a = build({ redis_url: db.server.url(), ...params }).step;
  const b = build({ redis_url: db.server.url(), ...params }).step;
  const now = Date.now();
  // Queued two minutes ago, then two more now.
  const clock = jest.spyOn(Date, 'now').mockReturnValue(now - 120_000);
  await enqueue(a, 'old-1', 'batch-model');
  clock.mockRestore();
  await enqueue(b, 'new-1', 'batch-model');
  await enqueue(a, 'new-2', 'batch-model');

  const first = await scrape(a);
  expect(await scrape(b)).toEqual({});
  expect(first['epd_coordinator_async_queue_depth{batch-queue}']).toBe(3);
  expect(first['epd_coordinator_async_queue_oldest_age_seconds{batch-queue}']).toBeGreaterThanOrEqual(119);
  expect(first['epd_coordinator_async_queue_oldest_age_seconds{batch-queue}']).toBeLessThan(130);
  // The default queue is configured too, and empty.
  expect(first['epd_coordinator_async_queue_depth{request-sortedset}']).toBe(0);
  expect(first['epd_coordinator_async_queue_oldest_age_seconds{request-sortedset}']).toBe(0);

  // The processor drains the queue (its dispatches fail; the results are stored): the gauges follow.
  const ap = new TestAsyncProcessor({
    redisUrl: db.server.url(),
    queues: [{ queueName: 'batch-queue', igwBaseUrl: 'http://127.0.0.1:9' }],
  });
  try {
    await ap.runOnce();
  } finally {
    await ap.close();
  }
  const drained = await scrape(a);
  expect(drained['epd_coordinator_async_queue_depth{batch-queue}']).toBe(0);
  expect(drained['epd_coordinator_async_queue_oldest_age_seconds{batch-queue}']).toBe(0);
});

test('when the holder stops scraping, its lease expires and another replica takes over', async () => {
  const a = build({ redis_url: db.server.url(), ...params }).step;
  const b = build({ redis_url: db.server.url(), ...params }).step;
  await enqueue(a, 'job-1', 'batch-model');
  expect(Object.keys(await scrape(a))).toHaveLength(4);
  expect(await scrape(b)).toEqual({});
  const ttl = await db.redis.pttl(QUEUE_METRICS_LEASE_KEY);
  expect(ttl).toBeGreaterThan(50_000);
  // The lease running out (a's pod gone) stands in for a minute without a's scrapes.
  await db.redis.pexpire(QUEUE_METRICS_LEASE_KEY, 1);
  await new Promise((r) => setTimeout(r, 20));
  expect((await scrape(b))['epd_coordinator_async_queue_depth{batch-queue}']).toBe(1);
  expect(await scrape(a)).toEqual({});
});

test('queue_metrics: false exports nothing and takes no lease; an unreachable Redis exports nothing', async () => {
  const off = build({ redis_url: db.server.url(), ...params, queue_metrics: false }).step;
  expect(await scrape(off)).toEqual({});
  expect(await db.redis.exists(QUEUE_METRICS_LEASE_KEY)).toBe(0);
  const down = build({ redis_url: 'redis://127.0.0.1:9/0?dial_timeout=200ms', ...params }).step;
  expect(await scrape(down)).toEqual({});
});
