/**
 * The whole loop on loopback: the step queues, the test processor (llm-d-async's contract) pops,
 * dispatches to a local HTTP server and writes the result, and the step delivers it.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type Redis from 'ioredis';
import { TestAsyncProcessor } from '../../../../launch/async-processor';
import { waitUntil } from '../../../../launch/ports';
import { RedisServer } from '../../../support/redis';
import { Wakeup } from '../../../../src/steps/async-broker/wakeup';
import { build, closeAll, json, request, respond, route, sleep, text } from './harness';

interface Seen {
  readonly path: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
}

let redisNotify: RedisServer;
let redisQuiet: RedisServer;
let redis: Redis;
let model: Server;
let modelUrl: string;
let seen: Seen[] = [];
let reply: { status: number; body: string } = { status: 200, body: '{"object":"chat.completion","choices":[]}' };
const aps: TestAsyncProcessor[] = [];

beforeAll(async () => {
  [redisNotify, redisQuiet] = await Promise.all([RedisServer.start(), RedisServer.start({ notifyKeyspaceEvents: '' })]);
  redis = redisNotify.client();
  model = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      seen.push({ path: req.url ?? '', headers: req.headers, body: Buffer.concat(parts).toString() });
      res.writeHead(reply.status, { 'content-type': 'application/json' });
      res.end(reply.body);
    });
  });
  await new Promise<void>((r) => model.listen(0, '127.0.0.1', r));
  modelUrl = `http://127.0.0.1:${(model.address() as AddressInfo).port}`;
});

afterEach(async () => {
  await Promise.all(aps.splice(0).map((ap) => ap.close()));
  await closeAll();
  await redis.flushall();
  seen = [];
  reply = { status: 200, body: '{"object":"chat.completion","choices":[]}' };
});

afterAll(async () => {
  redis.disconnect();
  await new Promise<void>((r) => model.close(() => r()));
  await Promise.all([redisNotify.destroy(), redisQuiet.destroy()]);
});

function processor(
  server: RedisServer = redisNotify,
  queue = 'request-sortedset',
  extra: { resultTtlSeconds?: number } = {},
): TestAsyncProcessor {
  const ap = new TestAsyncProcessor({
    redisUrl: server.url(),
    queues: [{ queueName: queue, igwBaseUrl: modelUrl, ...extra }],
    pollIntervalMs: 25,
  });
  aps.push(ap);
  return ap;
}

const CHAT = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
const post = (mode: string, id: string, more: Record<string, string> = {}) =>
  request({ headers: { 'x-ap-mode': mode, 'x-team': 'acme', 'x-request-id': id, ...more }, body: CHAT });

test('enqueue -> 202 -> dispatched without the mode header -> GET returns the model response', async () => {
  const { step, routes } = build({ redis_url: redisNotify.url(), wakeup_mode: 'poll' });
  const r = await respond(step, post('enqueue', 'loop-1', { 'x-llm-d-slo-ttft-ms': '800', authorization: 'Bearer t' }).ctx);
  expect(r.status).toBe(202);
  expect((await route(routes, 'GET', '/v1/requests/loop-1', { 'x-team': 'acme' })).status).toBe(202);

  const ap = processor(redisNotify, 'request-sortedset', { resultTtlSeconds: 3600 });
  await ap.runOnce();
  expect(seen).toHaveLength(1);
  expect(seen[0]!.path).toBe('/v1/chat/completions');
  expect(seen[0]!.headers['x-ap-mode']).toBeUndefined();
  expect(seen[0]!.headers['x-request-id']).toBeUndefined();
  expect(seen[0]!.headers['authorization']).toBeUndefined();
  expect(seen[0]!.headers['x-llm-d-slo-ttft-ms']).toBe('800');
  expect(seen[0]!.headers['x-llm-d-inference-fairness-id']).toBe('acme');
  expect(JSON.parse(seen[0]!.body)).toEqual(CHAT);
  // The processor cleaned up the markers after writing the result.
  expect(await redis.exists('request-active:acme:loop-1')).toBe(0);

  const got = await route(routes, 'GET', '/v1/requests/loop-1', { 'x-team': 'acme' });
  expect(got.status).toBe(200);
  expect(text(got)).toBe('{"object":"chat.completion","choices":[]}');
  expect((await route(routes, 'GET', '/v1/requests/loop-1', { 'x-team': 'other' })).status).toBe(410);
});

test('an upstream 4xx is stored and mirrored with its body', async () => {
  reply = { status: 404, body: '{"error":"no such model"}' };
  const { step, routes } = build({ redis_url: redisNotify.url(), wakeup_mode: 'poll' });
  await respond(step, post('enqueue', 'loop-404').ctx);
  await processor().runOnce();
  const got = await route(routes, 'GET', '/v1/requests/loop-404', { 'x-team': 'acme' });
  expect(got.status).toBe(404);
  expect(text(got)).toBe('{"error":"no such model"}');
});

test('wait wakes on the keyspace notification (auto probe selects notify)', async () => {
  const { step } = build({ redis_url: redisNotify.url(), wakeup_mode: 'auto' });
  await step.start();
  expect(await step.wakeupMode()).toBe('notify');
  // With the backup poll pushed out of reach, only the notification can end this hold in time.
  const interval = jest.spyOn(Wakeup.prototype, 'pollIntervalMs').mockReturnValue(60_000);
  try {
    const pending = respond(step, post('wait', 'wake-1').ctx);
    await waitUntil(
      async () => ((await redis.pubsub('NUMSUB', '__keyspace@0__:results:req:acme:wake-1')) as [string, number])[1] === 1,
      'the hold to subscribe',
      5000,
      10,
    );
    await processor().runOnce();
    let timer: NodeJS.Timeout | undefined;
    const r = await Promise.race([pending, new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), 10_000)))]);
    clearTimeout(timer);
    expect(r).not.toBeNull();
    expect(r!.status).toBe(200);
    expect(text(r!)).toBe('{"object":"chat.completion","choices":[]}');
    expect(interval).toHaveBeenCalledWith(expect.objectContaining({ live: true }));
  } finally {
    interval.mockRestore();
  }
  expect(await redis.exists('results:req:acme:wake-1')).toBe(0);
  // The hold unsubscribed on the way out.
  expect(((await redis.pubsub('NUMSUB', '__keyspace@0__:results:req:acme:wake-1')) as [string, number])[1]).toBe(0);
});

test('the channel carries the DB index from redis_url', async () => {
  const db2 = redisNotify.client(2);
  try {
    const { step } = build({ redis_url: redisNotify.url(2), wakeup_mode: 'notify' });
    const pending = respond(step, post('wait', 'db-2').ctx);
    await waitUntil(
      async () => ((await redis.pubsub('NUMSUB', '__keyspace@2__:results:req:acme:db-2')) as [string, number])[1] === 1,
      'the hold to subscribe',
      5000,
      10,
    );
    await db2.lpush('results:req:acme:db-2', JSON.stringify({ id: 'acme:db-2', status_code: 200, payload: 'two' }));
    expect(text(await pending)).toBe('two');
  } finally {
    db2.disconnect();
  }
});

test('wait falls back to polling when the server publishes no notifications (auto probe)', async () => {
  const quiet = redisQuiet.client();
  try {
    const { step } = build({ redis_url: redisQuiet.url(), wakeup_mode: 'auto' });
    expect(await step.wakeupMode()).toBe('poll');
    const pending = respond(step, post('wait', 'poll-1').ctx);
    await sleep(100);
    // Polling: the hold never subscribes.
    expect(((await quiet.pubsub('NUMSUB', '__keyspace@0__:results:req:acme:poll-1')) as [string, number])[1]).toBe(0);
    await processor(redisQuiet).runOnce();
    expect((await pending).status).toBe(200);
  } finally {
    await quiet.flushall();
    quiet.disconnect();
  }
});

test('explicit notify against a server without notifications still delivers (2 s backup poll)', async () => {
  const quiet = redisQuiet.client();
  try {
    const { step } = build({ redis_url: redisQuiet.url(), wakeup_mode: 'notify' });
    const pending = respond(step, post('wait', 'backup-1').ctx);
    await sleep(100);
    await processor(redisQuiet).runOnce();
    expect((await pending).status).toBe(200);
  } finally {
    await quiet.flushall();
    quiet.disconnect();
  }
});

test('wait cap -> 202, the request still runs, and the result is fetchable later', async () => {
  const { step, routes } = build({ redis_url: redisNotify.url(), wakeup_mode: 'notify', wait_cap_seconds: 1 });
  const r = await respond(step, post('wait', 'cap-1').ctx);
  expect(r.status).toBe(202);
  expect(json(r)).toEqual({ id: 'cap-1', status: 'pending' });
  await processor().runOnce();
  const got = await route(routes, 'GET', '/v1/requests/cap-1', { 'x-team': 'acme' });
  expect(got.status).toBe(200);
});

test('a wait retry after the cap re-attaches to the live request and gets its result', async () => {
  const { step } = build({ redis_url: redisNotify.url(), wakeup_mode: 'notify', wait_cap_seconds: 1 });
  expect((await respond(step, post('wait', 'cap-2').ctx)).status).toBe(202);
  const retry = respond(step, post('wait', 'cap-2').ctx);
  await sleep(100);
  const ap = processor();
  await ap.runOnce();
  expect((await retry).status).toBe(200);
  expect(seen).toHaveLength(1); // one generation only
});

test('DELETE before dispatch: never dispatched, GET then answers 499 CANCELLED', async () => {
  const { step, routes } = build({ redis_url: redisNotify.url(), wakeup_mode: 'poll' });
  await respond(step, post('enqueue', 'del-1').ctx);
  expect((await route(routes, 'DELETE', '/v1/requests/del-1', { 'x-team': 'acme' })).status).toBe(204);
  // Until the processor has seen it, the request is still pending.
  expect((await route(routes, 'GET', '/v1/requests/del-1', { 'x-team': 'acme' })).status).toBe(202);
  await processor().runOnce();
  expect(seen).toHaveLength(0);
  const got = await route(routes, 'GET', '/v1/requests/del-1', { 'x-team': 'acme' });
  expect(got.status).toBe(499);
  expect(json(got)).toEqual({ error: { message: 'cancelled', type: 'cancelled', code: 'CANCELLED' } });
  expect(await redis.exists('request-active:acme:del-1', 'request-cancel:acme:del-1')).toBe(0);
});

test('a client that leaves during wait is never dispatched; GET answers 499', async () => {
  const { step, routes } = build({ redis_url: redisNotify.url(), wakeup_mode: 'poll' });
  const req = post('wait', 'left-1');
  const pending = step.execute(req.ctx);
  await sleep(100);
  req.abort();
  await expect(pending).rejects.toThrow();
  await processor().runOnce();
  expect(seen).toHaveLength(0);
  expect((await route(routes, 'GET', '/v1/requests/left-1', { 'x-team': 'acme' })).status).toBe(499);
});

test('a result past its fetch grace -> 410', async () => {
  const { step, routes } = build({ redis_url: redisNotify.url(), wakeup_mode: 'poll', fetch_grace_seconds: 1 });
  await respond(step, post('enqueue', 'grace-1').ctx);
  await processor().runOnce();
  expect((await route(routes, 'GET', '/v1/requests/grace-1', { 'x-team': 'acme' })).status).toBe(200);
  await waitUntil(async () => (await redis.exists('results:req:acme:grace-1')) === 0, 'the grace to run out', 5000, 50);
  expect((await route(routes, 'GET', '/v1/requests/grace-1', { 'x-team': 'acme' })).status).toBe(410);
});

test('a deadline passed while queued: no dispatch, no result, GET -> 410 (A2)', async () => {
  const { step, routes } = build({ redis_url: redisNotify.url(), wakeup_mode: 'poll' });
  await respond(step, post('enqueue', 'old-1', { 'x-request-timeout-seconds': '1' }).ctx);
  const [member] = await redis.zrange('request-sortedset', 0, -1);
  const deadline = JSON.parse(member!).data.deadline as number;
  await waitUntil(() => Math.floor(Date.now() / 1000) > deadline, 'the deadline to pass', 5000, 50);
  const ap = processor();
  await ap.runOnce();
  expect(ap.expired).toEqual(['acme:old-1']);
  expect(seen).toHaveLength(0);
  expect(await redis.exists('results:req:acme:old-1')).toBe(0);
  expect((await route(routes, 'GET', '/v1/requests/old-1', { 'x-team': 'acme' })).status).toBe(410);
});

test('routed queues: the processor of that queue serves it', async () => {
  const { step, routes } = build({
    redis_url: redisNotify.url(),
    wakeup_mode: 'poll',
    routes: [{ model: 'm', tenant: 'acme', queue: 'acme-queue' }],
  });
  await respond(step, post('enqueue', 'routed-1').ctx);
  expect(await redis.zcard('acme-queue')).toBe(1);
  await processor(redisNotify, 'acme-queue').runOnce();
  expect((await route(routes, 'GET', '/v1/requests/routed-1', { 'x-team': 'acme' })).status).toBe(200);
});
