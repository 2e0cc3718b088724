/**
 * Issue 21 item 3, Cluster: three masters with a replica each on loopback. Every key a
 * transaction or script of a request touches hashes to one slot (the hash-tagged layout), and a
 * master killed (SIGKILL) under queue load is replaced by its replica while the broker and our
 * queue processor carry on.
 */
import { TestAsyncProcessor } from '../../launch/async-processor';
import { requestKeys } from '../../src/steps/async-broker/keys';
import { keySlot } from '../../src/steps/async-broker/key-slot';
import { build, closeAll, json, request, respond, route } from '../unit/steps/async-broker/harness';
import { RedisClusterSet } from '../support/redis-ha';
import { expectContract, runFailover } from './support/broker-failover';

jest.setTimeout(85_000);

let set: RedisClusterSet;

beforeAll(async () => {
  set = await RedisClusterSet.start({ nodeTimeoutMs: 1000 });
});

afterAll(async () => {
  await closeAll();
  await set?.destroy();
});

test("a request's keys share one slot, by the server's own CLUSTER KEYSLOT, and the whole loop runs without CROSSSLOT", async () => {
  const keys = requestKeys('acme', 'slot-1', 'cluster');
  expect(keys).toEqual({
    envelopeId: '{acme:slot-1}',
    mailbox: 'results:req:{acme:slot-1}',
    active: 'request-active:{acme:slot-1}',
    cancel: 'request-cancel:{acme:slot-1}',
  });
  const slots = await Promise.all([keys.mailbox, keys.active, keys.cancel].map((k) => set.serverKeySlot(k)));
  expect(new Set(slots).size).toBe(1);
  expect(slots[0]).toBe(keySlot(keys.active));
  // Spread over the masters: the layout does not pile every request onto one node.
  const owners = new Set<number>();
  for (let i = 0; i < 30; i++) owners.add((await set.masterFor(requestKeys('acme', `spread-${i}`, 'cluster').active))!.port);
  expect(owners.size).toBe(3);

  const { step, routes } = build({ redis_url: set.url(), ack_replicas: 1 });
  await step.start();
  expect(await step.wakeupMode()).toBe('poll');
  const post = (id: string) =>
    respond(
      step,
      request({ headers: { 'x-ap-mode': 'enqueue', 'x-team': 'acme', 'x-request-id': id }, body: { model: 'm', messages: [] } }).ctx,
    );
  const first = await post('slot-1');
  expect(first.status).toBe(202);
  expect(first.headers['x-ap-replicated']).toBe('true');
  // A retry re-attaches to the live copy (lookup MULTI and the un-cancel script), then DELETE cancels it (cancel script).
  expect((await post('slot-1')).status).toBe(202);
  expect((await route(routes, 'GET', '/v1/requests/slot-1', { 'x-team': 'acme' })).status).toBe(202);
  // The backlog gauges' lease and read scripts run on the queue's master.
  expect(await step.queueStats()).toEqual([{ queue: 'request-sortedset', depth: 1, oldestAgeSeconds: expect.any(Number) }]);
  expect((await route(routes, 'DELETE', '/v1/requests/slot-1', { 'x-team': 'acme' })).status).toBe(204);

  // The processor finds the cancel marker, stores CANCELLED and runs the cleanup script, all in the request's slot.
  const ap = new TestAsyncProcessor({
    redisUrl: set.url(),
    queues: [{ queueName: 'request-sortedset', igwBaseUrl: 'http://127.0.0.1:9' }],
  });
  try {
    await ap.runOnce();
  } finally {
    await ap.close();
  }
  const got = await route(routes, 'GET', '/v1/requests/slot-1', { 'x-team': 'acme' });
  expect(json(got)).toEqual({ error: { message: 'cancelled', type: 'cancelled', code: 'CANCELLED' } });
  await closeAll();
});

test('the master of the queue killed under queue load: its replica takes over and no accepted job runs twice', async () => {
  const victim = (await set.masterFor('request-sortedset'))!;
  const figures = await runFailover({
    redisUrl: set.url(),
    label: 'cluster',
    fail: async () => {
      await victim.kill();
      // Promoted: some other running node serves the queue's slot.
      const started = Date.now();
      for (;;) {
        const owner = await set.masterFor('request-sortedset');
        if (owner && owner !== victim) break;
        if (Date.now() - started > 20_000) throw new Error('no replica took over the queue slot');
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    heal: async () => {
      await victim.restart();
      await set.waitHealthy(30_000);
    },
  });
  process.stdout.write(`cluster failover figures: ${JSON.stringify(figures)}\n`);
  expect((await set.masterFor('request-sortedset'))!.port).not.toBe(victim.port);
  expectContract(figures);
});
