/**
 * Re-submission with the same client id (TestAsyncBrokerRetryReattaches of the later revision), and
 * our fix of the stale-result flaw: a retry is never handed back the failure it is retrying.
 */
import { build, json, request, respond, route, text, useRedis } from './harness';

const db = useRedis();

const CHAT = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
const params = () => ({ redis_url: db.server.url(), wakeup_mode: 'poll' });
const post = (mode: string, id?: string) =>
  request({ headers: { 'x-ap-mode': mode, 'x-team': 'acme', ...(id ? { 'x-request-id': id } : {}) }, body: CHAT });

async function members(): Promise<Array<{ internal: { request_token: string } }>> {
  return (await db.redis.zrange('request-sortedset', 0, -1)).map((m) => JSON.parse(m));
}

test('a live id is not enqueued again', async () => {
  const { step } = build(params());
  expect((await respond(step, post('enqueue', 'job-1').ctx)).status).toBe(202);
  const token = await db.redis.get('request-active:acme:job-1');
  const again = await respond(step, post('enqueue', 'job-1').ctx);
  expect(again.status).toBe(202);
  expect(text(again)).toBe('{"id":"job-1","status":"pending"}\n');
  expect(await members()).toHaveLength(1);
  expect(await db.redis.get('request-active:acme:job-1')).toBe(token);
});

test('a cancelled copy that is still queued is revived', async () => {
  const { step, routes } = build(params());
  await respond(step, post('enqueue', 'job-2').ctx);
  await route(routes, 'DELETE', '/v1/requests/job-2', { 'x-team': 'acme' });
  expect(await db.redis.exists('request-cancel:acme:job-2')).toBe(1);
  expect((await respond(step, post('enqueue', 'job-2').ctx)).status).toBe(202);
  expect(await db.redis.exists('request-cancel:acme:job-2')).toBe(0);
  expect(await members()).toHaveLength(1);
});

test('a cancellation tombstone runs fresh: mailbox cleared, a new generation queued', async () => {
  const { step, routes } = build(params());
  await db.redis.lpush(
    'results:req:acme:job-3',
    JSON.stringify({ id: 'acme:job-3', payload: '{"error":"cancelled"}', error_code: 'CANCELLED', error_message: 'cancelled' }),
  );
  expect((await respond(step, post('enqueue', 'job-3').ctx)).status).toBe(202);
  expect(await db.redis.exists('results:req:acme:job-3')).toBe(0);
  const [m] = await members();
  expect(await db.redis.get('request-active:acme:job-3')).toBe(m!.internal.request_token);
  expect((await route(routes, 'GET', '/v1/requests/job-3', { 'x-team': 'acme' })).status).toBe(202);
});

test.each([
  ['a stored 503', { status_code: 503, payload: 'overloaded' }],
  ['a stored 429', { status_code: 429, payload: 'slow down' }],
  ['DEADLINE_EXCEEDED', { error_code: 'DEADLINE_EXCEEDED', error_message: 'deadline exceeded', payload: '{"error":"deadline exceeded"}' }],
  ['INFERENCE_ERROR', { error_code: 'INFERENCE_ERROR', error_message: 'refused', payload: '{"error":"refused"}' }],
  ['a malformed entry', null],
])('stale-result fix: a retry after %s runs fresh instead of being served the old failure', async (_label, stored) => {
  const { step, routes } = build(params());
  await db.redis.lpush('results:req:acme:job-4', stored ? JSON.stringify({ id: 'acme:job-4', ...stored }) : 'garbage');
  expect((await respond(step, post('enqueue', 'job-4').ctx)).status).toBe(202);
  expect(await members()).toHaveLength(1);
  const fetched = await route(routes, 'GET', '/v1/requests/job-4', { 'x-team': 'acme' });
  expect(fetched.status).toBe(202);
});

test('a stored success is re-attached: enqueue answers 202 and queues nothing; GET returns it', async () => {
  const { step, routes } = build(params());
  await db.redis.lpush('results:req:acme:job-5', JSON.stringify({ id: 'acme:job-5', status_code: 200, payload: '{"ok":true}' }));
  const r = await respond(step, post('enqueue', 'job-5').ctx);
  expect(r.status).toBe(202);
  expect(await members()).toHaveLength(0);
  expect(text(await route(routes, 'GET', '/v1/requests/job-5', { 'x-team': 'acme' }))).toBe('{"ok":true}');
});

test('a wait retry is delivered the stored success and nothing is queued', async () => {
  const { step } = build(params());
  await db.redis.lpush('results:req:acme:job-6', JSON.stringify({ id: 'acme:job-6', status_code: 200, payload: '{"ok":1}' }));
  const r = await respond(step, post('wait', 'job-6').ctx);
  expect(r.status).toBe(200);
  expect(text(r)).toBe('{"ok":1}');
  expect(await members()).toHaveLength(0);
  expect(await db.redis.exists('results:req:acme:job-6')).toBe(0);
});

test('reattach is per tenant: another tenant with the same id gets its own request', async () => {
  const { step } = build(params());
  await respond(step, post('enqueue', 'job-7').ctx);
  const other = request({ headers: { 'x-ap-mode': 'enqueue', 'x-team': 'globex', 'x-request-id': 'job-7' }, body: CHAT });
  expect((await respond(step, other.ctx)).status).toBe(202);
  expect(await members()).toHaveLength(2);
});

test('without a client id every POST is a new request', async () => {
  const { step } = build(params());
  const a = post('enqueue');
  const b = post('enqueue');
  await respond(step, a.ctx);
  await respond(step, b.ctx);
  expect(a.ctx.requestId).not.toBe(b.ctx.requestId);
  expect(await members()).toHaveLength(2);
});

test('a failed retry-state lookup enqueues fresh', async () => {
  const { step } = build(params());
  await db.redis.set('results:req:acme:job-8', 'a string, not a list'); // LRANGE fails with WRONGTYPE
  const r = await respond(step, post('enqueue', 'job-8').ctx);
  expect(r.status).toBe(202);
  expect(json(r)).toEqual({ id: 'job-8', status: 'pending' });
  expect(await members()).toHaveLength(1);
});
