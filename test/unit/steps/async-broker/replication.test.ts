/**
 * Replica-confirmed enqueues (`ack_replicas`) against a real master, with and without a replica.
 */
import { RedisServer } from '../../../support/redis';
import { build, closeAll, request, respond } from './harness';
import type { AsyncBrokerStep } from '../../../../src/steps/async-broker';

let master: RedisServer;
let lonely: RedisServer;
let replica: RedisServer;

beforeAll(async () => {
  [master, lonely] = await Promise.all([RedisServer.start(), RedisServer.start()]);
  replica = await RedisServer.start({ extraArgs: ['--replicaof', '127.0.0.1', String(master.port)] });
  const c = master.client();
  for (let i = 0; i < 100 && !/state=online/.test(await c.info('replication')); i++) await new Promise((r) => setTimeout(r, 50));
  c.disconnect();
});

afterEach(closeAll);

afterAll(async () => {
  await Promise.all([replica.destroy(), master.destroy(), lonely.destroy()]);
});

const enqueue = (step: AsyncBrokerStep, id: string) =>
  respond(
    step,
    request({ headers: { 'x-ap-mode': 'enqueue', 'x-team': 'acme', 'x-request-id': id }, body: { model: 'm', messages: [] } }).ctx,
  );

async function waitCalls(server: RedisServer): Promise<number> {
  const c = server.client();
  try {
    return Number(/cmdstat_wait:calls=(\d+)/.exec(await c.info('commandstats'))?.[1] ?? 0);
  } finally {
    c.disconnect();
  }
}

test('with a replica online the 202 says x-ap-replicated: true, and the replica holds the job', async () => {
  const { step } = build({ redis_url: master.url(), ack_replicas: 1 });
  const r = await enqueue(step, 'rep-1');
  expect(r.status).toBe(202);
  expect(r.headers['x-ap-replicated']).toBe('true');
  // No wait needed: WAIT returned only once the replica had the write.
  const c = replica.client();
  try {
    expect(await c.zcard('request-sortedset')).toBe(1);
    expect(await c.exists('request-active:acme:rep-1')).toBe(1);
  } finally {
    c.disconnect();
  }
});

test('without a replica the WAIT times out: still 202 (the job is on the master) with x-ap-replicated: false', async () => {
  const { step } = build({ redis_url: lonely.url(), ack_replicas: 1, ack_timeout_ms: 100 });
  const r = await enqueue(step, 'alone-1');
  expect(r.status).toBe(202);
  expect(r.headers['x-ap-replicated']).toBe('false');
  const c = lonely.client();
  try {
    expect(await c.zcard('request-sortedset')).toBe(1);
  } finally {
    c.flushall().catch(() => undefined);
    c.disconnect();
  }
});

test('concurrent enqueues share WAITs: one on the wire at a time, the rest join the next', async () => {
  const { step } = build({ redis_url: lonely.url(), ack_replicas: 1, ack_timeout_ms: 200 });
  const before = await waitCalls(lonely);
  const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => enqueue(step, `group-${i}`)));
  expect(answers.map((a) => a.status)).toEqual(Array(20).fill(202));
  expect(answers.every((a) => a.headers['x-ap-replicated'] === 'false')).toBe(true);
  // 20 submits, yet at most a few WAITs (each blocks its connection for the whole timeout).
  expect((await waitCalls(lonely)) - before).toBeLessThanOrEqual(3);
});

test('a plain URL waits for nothing by default: no WAIT and no header', async () => {
  const { step } = build({ redis_url: master.url() });
  const before = await waitCalls(master);
  const r = await enqueue(step, 'plain-1');
  expect(r.status).toBe(202);
  expect(r.headers['x-ap-replicated']).toBeUndefined();
  expect(await waitCalls(master)).toBe(before);
});
