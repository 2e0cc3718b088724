/**
 * Issue #5 acceptance through the real Envoy and a real Redis: the async-broker step first in the
 * pipeline, the test processor dispatching queued work back through Envoy's `async` listener, its
 * own entry (so it re-enters the pipeline without the mode header, and the fairness id and
 * objective it stamps are trusted there and nowhere else), and the result routes answered through Envoy.
 */
import { request } from 'undici';
import { RedisServer } from '../support/redis';
import { TestAsyncProcessor } from '../../launch/async-processor';
import { waitUntil } from '../../launch/ports';
import { defaultSteps, startStack, type Stack } from '../support/stack';
import type { RecordedRequest } from '../../sim/simulator';
import { envoyStatusCode } from '../../src/extproc/status';

const MODEL = 'sim-model';
const QUEUE = 'request-sortedset';
let seq = 0;
const nextId = (): string => `ab-${process.pid}-${Date.now()}-${++seq}`;

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly text: string;
  readonly json: unknown;
}

let redisServer: RedisServer;
let stack: Stack;
let ap: TestAsyncProcessor;

async function call(
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: unknown,
  base = stack.publicUrl,
): Promise<Answer> {
  const res = await request(base + path, {
    method: method as 'GET',
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.body.text();
  const headersOut: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') headersOut[k] = v;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: headersOut, text, json };
}

const chat = (content: string) => ({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 20 });
const post = (mode: string | undefined, id: string, content: string, more: Record<string, string> = {}) =>
  call(
    'POST',
    '/v1/chat/completions',
    { 'x-request-id': id, 'x-team': 'acme', ...(mode ? { 'x-ap-mode': mode } : {}), ...more },
    chat(content),
  );
const fetchResult = (id: string, tenant = 'acme') => call('GET', `/v1/requests/${id}`, { 'x-team': tenant });

/** Decode legs that carried this prompt. */
const decodesOf = (content: string): RecordedRequest[] =>
  stack.sims.decode.requests.filter((r) => JSON.stringify(r.json ?? {}).includes(content));

beforeAll(async () => {
  redisServer = await RedisServer.start();
  stack = await startStack({
    // Prefill and decode take a little while, so concurrent requests overlap in the pipeline.
    simulator: { timeToFirstTokenMs: 300 },
    steps: (urls) => [
      {
        type: 'async-broker',
        params: {
          redis_url: redisServer.url(),
          wakeup_mode: 'auto',
          fetch_grace_seconds: 1,
          // Long enough for a dispatched request to come back, short enough to test the fallback.
          wait_cap_seconds: 5,
          routes: [{ model: MODEL, queue: QUEUE, tier: 'interactive' }],
          objectives: { interactive: { reserved: 'interactive-reserved', overflow: 'interactive-overflow' } },
          quota: { limits: { 'quota-team': 2 } },
        },
      },
      ...defaultSteps(urls),
    ],
  });
  ap = new TestAsyncProcessor({
    redisUrl: redisServer.url(),
    queues: [{ queueName: QUEUE, igwBaseUrl: stack.asyncUrl, resultTtlSeconds: 600, inferenceObjective: 'queued-batch' }],
  });
}, 120_000);

afterAll(async () => {
  await ap?.close();
  await stack?.close();
  await redisServer?.destroy();
});

beforeEach(() => stack.reset());

test('enqueue -> 202 -> the processor dispatches through Envoy into the pipeline -> GET returns the model 200', async () => {
  const id = nextId();
  const queued = await post('enqueue', id, 'queued hello');
  expect(queued.status).toBe(202);
  expect(queued.json).toEqual({ id, status: 'pending' });
  expect(queued.headers['x-request-id']).toBe(id);
  expect(stack.sims.decode.requests).toHaveLength(0);

  // The keys an enqueue writes, byte for byte with llm-d-async's producer.
  const c = redisServer.client();
  try {
    const [member, score] = await c.zrange(QUEUE, 0, -1, 'WITHSCORES');
    const env = JSON.parse(member!);
    expect(Object.keys(env)).toEqual(['internal', 'request_kind', 'data']);
    expect(env.internal.result_queue_name).toBe(`results:req:acme:${id}`);
    expect(env.data).toMatchObject({
      id: `acme:${id}`,
      endpoint: '/v1/chat/completions',
      metadata: { userid: 'acme' },
      payload: chat('queued hello'),
    });
    expect(Number(score)).toBe(env.data.deadline);
    expect(await c.get(`request-active:acme:${id}`)).toBe(env.internal.request_token);
  } finally {
    c.disconnect();
  }
  expect((await fetchResult(id)).status).toBe(202);

  await ap.runOnce();
  // The dispatch re-entered the full pipeline: render, prefill and decode all ran.
  expect(stack.sims.render.requests.length).toBeGreaterThan(0);
  expect(stack.sims.prefill.requests).toHaveLength(1);
  const [decode] = decodesOf('queued hello');
  expect(decode!.headers['x-ap-mode']).toBeUndefined();
  expect(decode!.headers['x-llm-d-inference-fairness-id']).toBe('acme');

  const got = await fetchResult(id);
  expect(got.status).toBe(200);
  expect((got.json as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe('queued hello');
  expect((await fetchResult(id, 'globex')).status).toBe(410);
});

test('wait -> the model response on the same connection', async () => {
  const id = nextId();
  const pending = post('wait', id, 'wait for me');
  const c = redisServer.client();
  try {
    await waitUntil(async () => (await c.zcard(QUEUE)) > 0, 'the request to be queued', 5000, 20);
  } finally {
    c.disconnect();
  }
  await ap.runOnce();
  const r = await pending;
  expect(r.status).toBe(200);
  expect(r.headers['x-request-id']).toBe(id);
  expect((r.json as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe('wait for me');
});

test('the wait cap -> 202, and the result is fetchable later', async () => {
  const id = nextId();
  const r = await post('wait', id, 'capped');
  expect(r.status).toBe(202);
  expect(r.json).toEqual({ id, status: 'pending' });
  await ap.runOnce();
  const got = await fetchResult(id);
  expect(got.status).toBe(200);
  expect((got.json as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe('capped');
}, 30_000);

test('DELETE of a queued request: never dispatched, GET answers CANCELLED', async () => {
  const id = nextId();
  expect((await post('enqueue', id, 'delete me')).status).toBe(202);
  expect((await call('DELETE', `/v1/requests/${id}`, { 'x-team': 'acme' })).status).toBe(204);
  await ap.runOnce();
  expect(decodesOf('delete me')).toHaveLength(0);
  const got = await fetchResult(id);
  // The step answers 499; Envoy's ImmediateResponse only carries codes its StatusCode enum defines,
  // so the protocol layer sends the class's base code. The body still says CANCELLED.
  expect(got.status).toBe(envoyStatusCode(499));
  expect(got.json).toEqual({ error: { message: 'cancelled', type: 'cancelled', code: 'CANCELLED' } });
});

test('a client that disconnects during wait cancels its request before dispatch', async () => {
  const id = nextId();
  const controller = new AbortController();
  const held = request(stack.publicUrl + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': id, 'x-team': 'acme', 'x-ap-mode': 'wait' },
    body: JSON.stringify(chat('hang up')),
    signal: controller.signal,
  }).catch(() => undefined);
  const c = redisServer.client();
  try {
    await waitUntil(async () => (await c.exists(`request-active:acme:${id}`)) === 1, 'the request to be queued', 5000, 20);
    controller.abort();
    await held;
    await waitUntil(async () => (await c.exists(`request-cancel:acme:${id}`)) === 1, 'the cancel marker', 5000, 20);
  } finally {
    c.disconnect();
  }
  await ap.runOnce();
  expect(decodesOf('hang up')).toHaveLength(0);
  expect((await fetchResult(id)).json).toEqual({ error: { message: 'cancelled', type: 'cancelled', code: 'CANCELLED' } });
});

test('a result past its grace -> 410', async () => {
  const id = nextId();
  await post('enqueue', id, 'grace');
  await ap.runOnce();
  expect((await fetchResult(id)).status).toBe(200);
  const c = redisServer.client();
  try {
    await waitUntil(async () => (await c.exists(`results:req:acme:${id}`)) === 0, 'the grace to run out', 5000, 50);
  } finally {
    c.disconnect();
  }
  expect((await fetchResult(id)).status).toBe(410);
});

test('a deadline passed in the queue -> no dispatch, GET 410', async () => {
  const id = nextId();
  await post('enqueue', id, 'too late', { 'x-request-timeout-seconds': '1' });
  await new Promise((r) => setTimeout(r, 2100));
  await ap.runOnce();
  expect(decodesOf('too late')).toHaveLength(0);
  expect((await fetchResult(id)).status).toBe(410);
});

test('quota: limit 2, three concurrent passthrough requests -> the third is overflow at the worker', async () => {
  const tag = nextId();
  const rs = await Promise.all(
    [1, 2, 3].map((i) =>
      post('passthrough', `${tag}-${i}`, `quota ${tag} ${i}`, { 'x-team': 'quota-team', 'x-llm-d-inference-objective': 'self-assigned' }),
    ),
  );
  expect(rs.map((r) => r.status)).toEqual([200, 200, 200]);
  const objectives = [1, 2, 3].map((i) => decodesOf(`quota ${tag} ${i}`)[0]!.headers['x-llm-d-inference-objective']).sort();
  expect(objectives).toEqual(['interactive-overflow', 'interactive-reserved', 'interactive-reserved']);
  for (const i of [1, 2, 3]) expect(decodesOf(`quota ${tag} ${i}`)[0]!.headers['x-llm-d-inference-fairness-id']).toBe('quota-team');
});

test('Redis stopped: passthrough still succeeds, enqueue 503; after a restart enqueue works again', async () => {
  await redisServer.stop();
  try {
    const pass = await post('passthrough', nextId(), 'redis is down');
    expect(pass.status).toBe(200);
    const id = nextId();
    const failed = await post('enqueue', id, 'not now');
    expect(failed.status).toBe(503);
    expect(failed.json).toEqual({ error: { message: 'failed to enqueue request', type: 'api_error', code: 'ENQUEUE_FAILED' } });
  } finally {
    await redisServer.restart();
  }
  let last = 0;
  await waitUntil(
    async () => (last = (await post('enqueue', nextId(), 'back again')).status) === 202,
    `enqueue to work again (last ${last})`,
    15_000,
    200,
  );
}, 60_000);

test("trust boundary: a client fairness id or objective never reaches a worker; the processor's stamp through its own entry does", async () => {
  // Everything a client could try, the origin marker as an HTTP header included (the real one is gRPC metadata).
  const spoof = {
    'x-llm-d-inference-fairness-id': 'spoofed',
    'x-gateway-inference-fairness-id': 'spoofed',
    'x-llm-d-inference-objective': 'self-assigned',
    'x-gateway-inference-objective': 'self-assigned',
    'x-epd-origin': 'async-processor',
  };
  const gatewayHeaders = (r: RecordedRequest) => ({
    fairness: r.headers['x-llm-d-inference-fairness-id'],
    fairnessOld: r.headers['x-gateway-inference-fairness-id'],
    objective: r.headers['x-llm-d-inference-objective'],
    objectiveOld: r.headers['x-gateway-inference-objective'],
  });
  const legsOf = (content: string): RecordedRequest[] =>
    [...stack.sims.prefill.requests, ...stack.sims.decode.requests].filter((r) => JSON.stringify(r.json ?? {}).includes(content));
  const none = { fairness: undefined, fairnessOld: undefined, objective: undefined, objectiveOld: undefined };

  // The public listener, no mode header: the broker does nothing, the header policy removes them all.
  const pub = await post(undefined, nextId(), 'public spoof', spoof);
  expect(pub.status).toBe(200);
  const pubLegs = legsOf('public spoof');
  expect(pubLegs.map((r) => r.headers['epp-profile']).sort()).toEqual(['decode', 'prefill']);
  for (const leg of pubLegs) expect(gatewayHeaders(leg)).toEqual(none);

  // Queued with the same headers: the processor's dispatch through its entry carries its own stamp.
  const id = nextId();
  expect((await post('enqueue', id, 'stamped by the processor', spoof)).status).toBe(202);
  await ap.runOnce();
  const queuedLegs = legsOf('stamped by the processor');
  expect(queuedLegs.map((r) => r.headers['epp-profile']).sort()).toEqual(['decode', 'prefill']);
  for (const leg of queuedLegs) expect(gatewayHeaders(leg)).toEqual({ ...none, fairness: 'acme', objectiveOld: 'queued-batch' });
  expect((await fetchResult(id)).status).toBe(200);

  // The entry trusts only the configured headers (not the deprecated fairness alias), and only
  // serves the pipeline's paths.
  const direct = await call(
    'POST',
    '/v1/chat/completions',
    { 'x-request-id': nextId(), ...spoof },
    chat('direct to the entry'),
    stack.asyncUrl,
  );
  expect(direct.status).toBe(200);
  for (const leg of legsOf('direct to the entry')) {
    expect(gatewayHeaders(leg)).toEqual({
      fairness: 'spoofed',
      fairnessOld: undefined,
      objective: 'self-assigned',
      objectiveOld: 'self-assigned',
    });
  }
  expect((await call('GET', '/v1/models', {}, undefined, stack.asyncUrl)).status).toBe(404);
});

test("the service's /metrics exports the queue's depth and its oldest job's age, and follows the processor draining it", async () => {
  const scrape = async (): Promise<Record<string, number>> => {
    const res = await request(`http://127.0.0.1:${stack.service.metricsPort}/metrics`, { signal: AbortSignal.timeout(10_000) });
    const out: Record<string, number> = {};
    for (const m of (await res.body.text()).matchAll(/^(epd_coordinator_async_queue_\w+)\{queue="([^"]+)"\} (\S+)$/gm)) {
      out[`${m[1]}{${m[2]}}`] = Number(m[3]);
    }
    return out;
  };
  const ids = [nextId(), nextId()];
  for (const id of ids) expect((await post('enqueue', id, `backlog ${id}`)).status).toBe(202);
  await new Promise((r) => setTimeout(r, 1100));
  const queued = await scrape();
  expect(queued[`epd_coordinator_async_queue_depth{${QUEUE}}`]).toBe(2);
  expect(queued[`epd_coordinator_async_queue_oldest_age_seconds{${QUEUE}}`]).toBeGreaterThanOrEqual(1);
  await ap.runOnce();
  const drained = await scrape();
  expect(drained[`epd_coordinator_async_queue_depth{${QUEUE}}`]).toBe(0);
  expect(drained[`epd_coordinator_async_queue_oldest_age_seconds{${QUEUE}}`]).toBe(0);
});
