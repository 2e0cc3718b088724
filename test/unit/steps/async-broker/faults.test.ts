/**
 * Redis going away and coming back (reference async-broker.md §6.1): passthrough fails open, queued
 * modes answer 503 with the fixed text, the routes answer 500, and everything heals after a restart.
 */
import { waitUntil } from '../../../../launch/ports';
import { RedisServer } from '../../../support/redis';
import { build, closeAll, json, request, respond, route, sleep } from './harness';

let server: RedisServer;

beforeAll(async () => {
  server = await RedisServer.start();
});

afterEach(closeAll);

afterAll(async () => {
  await server.destroy();
});

const CHAT = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
const params = () => ({
  redis_url: server.url(),
  wakeup_mode: 'poll',
  objectives: { '': { reserved: 'gold', overflow: 'bronze' } },
  quota: { limits: { acme: 2 } },
});

test('Redis stopped mid-test: passthrough still serves, enqueue 503, routes 500; all well again after a restart', async () => {
  const { step, routes } = build(params());
  await step.start();
  expect(await step.ping()).toBe(true);
  expect((await respond(step, request({ headers: { 'x-ap-mode': 'enqueue' }, body: CHAT }).ctx)).status).toBe(202);

  await server.stop();

  // Requests without the header never touch Redis.
  expect(await step.execute(request({ body: CHAT }).ctx)).toBeUndefined();

  // Passthrough fails open: reserved, headers stamped, the pipeline continues.
  const pass = request({ headers: { 'x-ap-mode': 'passthrough', 'x-team': 'acme' }, body: CHAT });
  expect(await step.execute(pass.ctx)).toBeUndefined();
  expect(pass.ctx.stampedHeaders()).toEqual({ 'x-llm-d-inference-objective': 'gold', 'x-llm-d-inference-fairness-id': 'acme' });

  for (const mode of ['enqueue', 'wait']) {
    const r = await respond(step, request({ headers: { 'x-ap-mode': mode, 'x-request-id': `down-${mode}` }, body: CHAT }).ctx);
    expect(r.status).toBe(503);
    expect(r.headers).toEqual({ 'content-type': 'application/json', 'x-request-id': `down-${mode}` });
    // The fixed text of the later revision: no Redis error text reaches the client.
    expect(json(r)).toEqual({ error: { message: 'failed to enqueue request', type: 'api_error', code: 'ENQUEUE_FAILED' } });
  }

  const got = await route(routes, 'GET', '/v1/requests/abc');
  expect(got.status).toBe(500);
  expect(json(got)).toEqual({ error: { message: 'failed to look up the request', type: 'api_error', code: 'LOOKUP_FAILED' } });
  const del = await route(routes, 'DELETE', '/v1/requests/abc');
  expect(del.status).toBe(500);
  expect(json(del)).toEqual({ error: { message: 'failed to delete the result', type: 'api_error', code: 'DELETE_FAILED' } });
  expect(await step.ping(200)).toBe(false);

  await server.restart();
  await waitUntil(() => step.ping(200), 'the step to reconnect', 10_000, 100);
  const back = await respond(step, request({ headers: { 'x-ap-mode': 'enqueue', 'x-request-id': 'back-1' }, body: CHAT }).ctx);
  expect(back.status).toBe(202);
  const c = server.client();
  try {
    expect(await c.exists('request-active:default:back-1')).toBe(1);
    // Quota counting works again too.
    const a = request({ headers: { 'x-ap-mode': 'passthrough', 'x-team': 'acme' }, body: CHAT });
    await step.execute(a.ctx);
    expect(await c.get('quota:userid:acme')).toBe('1');
    a.abort();
    await waitUntil(async () => (await c.get('quota:userid:acme')) === '0', 'the slot to be released', 5000, 20);
  } finally {
    await c.flushall();
    c.disconnect();
  }
});

test('a wait hold survives Redis going away: lookup errors are ignored until the cap', async () => {
  const { step } = build({ ...params(), wait_cap_seconds: 2 });
  await step.start();
  const pending = respond(step, request({ headers: { 'x-ap-mode': 'wait', 'x-request-id': 'hold-1' }, body: CHAT }).ctx);
  await sleep(200);
  await server.stop();
  const r = await pending;
  expect(r.status).toBe(202);
  expect(json(r)).toEqual({ id: 'hold-1', status: 'pending' });
  await server.restart();
});

test('start() fails fast when Redis is unreachable; the factory itself never touches the network', async () => {
  const dead = await RedisServer.start();
  const url = dead.url();
  await dead.destroy();
  const { step } = build({ redis_url: url, wakeup_mode: 'auto' });
  await expect(step.start()).rejects.toThrow(/Redis/);
  expect(await step.ping(200)).toBe(false);
  // auto with no answer polls for now, and asks again later.
  expect(await step.wakeupMode()).toBe('poll');
});

test('close() is idempotent and later requests fail closed for queued modes', async () => {
  const { step } = build(params());
  await step.start();
  await step.close();
  await step.close();
  const r = await respond(step, request({ headers: { 'x-ap-mode': 'enqueue' }, body: CHAT }).ctx);
  expect(r.status).toBe(503);
});
