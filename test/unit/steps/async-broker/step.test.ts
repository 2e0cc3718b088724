/**
 * The step against a real Redis, following the upstream catalogue (async_broker_test.go in PR #2505
 * and asyncbroker/broker_test.go of the later revision): same harness settings, same assertions.
 */
import { build, json, request, respond, route, sleep, text, useRedis } from './harness';

const db = useRedis();

const base = () => ({
  redis_url: db.server.url(),
  wakeup_mode: 'poll',
  routes: [{ model: 'test-model', queue: 'team-default-queue', tier: 'interactive' }],
  objectives: { interactive: { reserved: 'interactive-reserved', overflow: 'interactive-overflow' } },
  quota: { limits: { 'limited-team': 1 } },
});

const CHAT = { model: 'test-model', messages: [{ role: 'user', content: 'hello' }] };

describe('mode none (TestAsyncBrokerNoModeHeaderIsNoOp)', () => {
  test('no mode header: nothing answered, client headers kept, Redis untouched', async () => {
    const { step } = build(base());
    const { ctx } = request({ headers: { 'x-llm-d-inference-fairness-id': 'spoofed', 'x-llm-d-inference-objective': 'mine' }, body: CHAT });
    expect(await step.execute(ctx)).toBeUndefined();
    expect(ctx.headers['x-llm-d-inference-fairness-id']).toBe('spoofed');
    expect(ctx.headers['x-llm-d-inference-objective']).toBe('mine');
    expect(ctx.stampedHeaders()).toEqual({});
    expect(await db.redis.keys('*')).toEqual([]);
  });

  test('an empty mode header is mode none', async () => {
    const { step } = build(base());
    expect(await step.execute(request({ headers: { 'X-AP-Mode': '' }, body: CHAT }).ctx)).toBeUndefined();
  });
});

describe('rejections (TestAsyncBrokerRejections)', () => {
  test.each<[string, Record<string, string>, Record<string, unknown>, string]>([
    ['unknown mode', { 'X-AP-Mode': 'sideways' }, CHAT, 'unknown X-AP-Mode value'],
    ['stream in enqueue', { 'X-AP-Mode': 'enqueue' }, { ...CHAT, stream: true }, 'stream is only supported in passthrough mode'],
    ['stream in wait', { 'X-AP-Mode': 'wait' }, { ...CHAT, stream: true }, 'stream is only supported in passthrough mode'],
    ['no model', { 'X-AP-Mode': 'enqueue' }, { messages: [] }, 'model is required'],
    ['no model in passthrough', { 'X-AP-Mode': 'passthrough' }, { model: 7 }, 'model is required'],
    ['tenant with a colon', { 'X-AP-Mode': 'enqueue', 'X-Team': 'a:b' }, CHAT, 'X-Team must not contain ":"'],
  ])('%s -> 400', async (_label, headers, body, message) => {
    const { step } = build(base());
    const r = await respond(step, request({ headers, body }).ctx);
    expect(r.status).toBe(400);
    expect(r.headers['content-type']).toBe('application/json');
    expect(text(r)).toBe(JSON.stringify({ error: { message, type: 'invalid_request_error', code: 'INVALID_REQUEST' } }) + '\n');
    expect(await db.redis.keys('*')).toEqual([]);
  });

  test('mode values are case-insensitive', async () => {
    const { step } = build(base());
    const r = await respond(step, request({ headers: { 'X-AP-Mode': 'EnQueue' }, body: CHAT }).ctx);
    expect(r.status).toBe(202);
  });

  test('the configured mode header name is used in the message', async () => {
    const { step } = build({ ...base(), mode_header: 'X-Queue-Mode' });
    const r = await respond(step, request({ headers: { 'x-queue-mode': 'later' }, body: CHAT }).ctx);
    expect(json(r)['error']).toMatchObject({ message: 'unknown X-Queue-Mode value' });
  });
});

describe('enqueue (TestAsyncBrokerEnqueue)', () => {
  test('202 pending, one member on the routed queue with the full envelope, the active marker set', async () => {
    const { step } = build(base());
    const before = Math.floor(Date.now() / 1000);
    const r = await respond(
      step,
      request({
        headers: {
          'x-request-id': 'req-test-1',
          'X-AP-Mode': 'enqueue',
          'X-Team': 'team-a',
          'X-Request-Timeout-Seconds': '120',
          'x-llm-d-slo-ttft-ms': '800',
          traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
          authorization: 'Bearer secret',
        },
        body: CHAT,
      }).ctx,
    );
    expect(r.status).toBe(202);
    expect(r.headers).toEqual({ 'content-type': 'application/json', 'x-request-id': 'req-test-1' });
    expect(text(r)).toBe('{"id":"req-test-1","status":"pending"}\n');

    const members = await db.redis.zrange('team-default-queue', 0, -1, 'WITHSCORES');
    expect(members).toHaveLength(2);
    const env = JSON.parse(members[0]!) as { internal: Record<string, string>; data: Record<string, unknown> };
    expect(env.internal['result_queue_name']).toBe('results:req:team-a:req-test-1');
    expect(env.data['id']).toBe('team-a:req-test-1');
    expect(env.data['endpoint']).toBe('/v1/chat/completions');
    expect(env.data['metadata']).toEqual({ traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', userid: 'team-a' });
    expect((env.data['payload'] as Record<string, unknown>)['model']).toBe('test-model');
    expect(env.data['headers']).toEqual({ 'x-llm-d-slo-ttft-ms': '800' });
    expect(members[0]!.toLowerCase()).not.toContain('x-ap-mode');
    expect(members[0]!).not.toContain('secret');
    const deadline = env.data['deadline'] as number;
    expect(Math.abs(deadline - (before + 120))).toBeLessThanOrEqual(5);
    expect(Number(members[1])).toBe(deadline);
    expect(await db.redis.exists('request-active:team-a:req-test-1')).toBe(1);
  });

  test('without a tenant header the tenant is "default"; an unrouted model goes to default_queue', async () => {
    const { step } = build(base());
    const { ctx } = request({ headers: { 'X-AP-Mode': 'enqueue' }, body: { model: 'other-model', prompt: 'x' }, path: '/v1/completions' });
    const r = await respond(step, ctx);
    expect(r.status).toBe(202);
    expect(json(r)).toEqual({ id: ctx.requestId, status: 'pending' });
    const [member] = await db.redis.zrange('request-sortedset', 0, -1);
    expect(JSON.parse(member!).data).toMatchObject({
      id: `default:${ctx.requestId}`,
      endpoint: '/v1/completions',
      metadata: { userid: 'default' },
    });
    expect(await db.redis.exists(`request-active:default:${ctx.requestId}`)).toBe(1);
  });

  test('an invalid client id is replaced by a UUID, which is what the client gets back', async () => {
    const { step } = build(base());
    const { ctx } = request({ headers: { 'X-AP-Mode': 'enqueue', 'x-request-id': 'not valid!' }, body: CHAT });
    const r = await respond(step, ctx);
    expect(ctx.requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(r.headers['x-request-id']).toBe(ctx.requestId);
    expect(text(r)).not.toContain('not valid');
  });
});

describe('wait', () => {
  test('delivers a result already in the mailbox, then deletes it (TestAsyncBrokerWaitDeliversResult)', async () => {
    const { step } = build(base());
    await db.redis.lpush(
      'results:req:default:req-test-1',
      JSON.stringify({ id: 'default:req-test-1', status_code: 200, payload: '{"object":"chat.completion"}' }),
    );
    const r = await respond(step, request({ headers: { 'X-AP-Mode': 'wait', 'x-request-id': 'req-test-1' }, body: CHAT }).ctx);
    expect(r.status).toBe(200);
    expect(r.headers).toEqual({ 'content-type': 'application/json', 'x-request-id': 'req-test-1' });
    expect(text(r)).toBe('{"object":"chat.completion"}');
    expect(await db.redis.exists('results:req:default:req-test-1')).toBe(0);
    // Later revision: a retry re-attached to a stored result queues nothing.
    expect(await db.redis.zcard('team-default-queue')).toBe(0);
  });

  test('the wait cap answers 202 pending and leaves the request queued (TestAsyncBrokerWaitCapFallsBackToPending)', async () => {
    const { step } = build({ ...base(), wait_cap_seconds: 1 });
    const started = Date.now();
    const { ctx } = request({ headers: { 'X-AP-Mode': 'wait', 'x-request-id': 'capped-1' }, body: CHAT });
    const r = await respond(step, ctx);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    expect(r.status).toBe(202);
    expect(text(r)).toBe('{"id":"capped-1","status":"pending"}\n');
    expect(r.headers['x-request-id']).toBe('capped-1');
    expect(await db.redis.zcard('team-default-queue')).toBe(1);
    expect(await db.redis.exists('request-active:default:capped-1')).toBe(1);
  });

  test('the deadline answers 504 DEADLINE_EXCEEDED (TestAsyncBrokerWaitDeadlineAnswersTimeout)', async () => {
    const { step } = build({ ...base(), timeouts: { wait: { default_seconds: 1 } } });
    const started = Date.now();
    const r = await respond(step, request({ headers: { 'X-AP-Mode': 'wait', 'x-request-id': 'late-1' }, body: CHAT }).ctx);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    expect(r.status).toBe(504);
    expect(r.headers['x-request-id']).toBe('late-1');
    expect(json(r)).toEqual({
      error: { message: 'request deadline exceeded before a result was produced', type: 'timeout_error', code: 'DEADLINE_EXCEEDED' },
    });
  });

  test('a cap at or above the timeout keeps deadline semantics (504, not 202)', async () => {
    const { step } = build({ ...base(), wait_cap_seconds: 5, timeouts: { wait: { default_seconds: 1 } } });
    const r = await respond(step, request({ headers: { 'X-AP-Mode': 'wait' }, body: CHAT }).ctx);
    expect(r.status).toBe(504);
  });

  test('a result pushed during the hold is delivered (poll mode)', async () => {
    const { step } = build(base());
    const { ctx } = request({ headers: { 'X-AP-Mode': 'wait', 'x-request-id': 'soon-1' }, body: CHAT });
    const pending = respond(step, ctx);
    await sleep(300);
    await db.redis.lpush('results:req:default:soon-1', JSON.stringify({ id: 'default:soon-1', status_code: 201, payload: 'done' }));
    const r = await pending;
    expect(r.status).toBe(201);
    expect(text(r)).toBe('done');
  });

  test('a client that goes away during the hold cancels its request (cancel marker = active token)', async () => {
    const { step } = build(base());
    const { ctx, abort } = request({ headers: { 'X-AP-Mode': 'wait', 'x-request-id': 'gone-1' }, body: CHAT });
    const pending = step.execute(ctx);
    await sleep(300);
    abort();
    await expect(pending).rejects.toThrow(/client went away/);
    const token = await db.redis.get('request-active:default:gone-1');
    expect(token).toMatch(/^[0-9a-f]{32}$/);
    expect(await db.redis.get('request-cancel:default:gone-1')).toBe(token);
    expect(await db.redis.ttl('request-cancel:default:gone-1')).toBeGreaterThan(604000);
  });
});

describe('passthrough (TestAsyncBrokerPassthroughStampsAndClassifies)', () => {
  test('reserved, overflow while the slot is held, reserved again after release; unlimited tenants always reserved', async () => {
    const { step } = build(base());
    const spoof = {
      'X-AP-Mode': 'passthrough',
      'X-Team': 'limited-team',
      'x-llm-d-inference-objective': 'self-assigned',
      'x-llm-d-inference-fairness-id': 'spoofed',
    };

    const first = request({ headers: spoof, body: CHAT });
    expect(await step.execute(first.ctx)).toBeUndefined();
    expect(first.ctx.stampedHeaders()).toMatchObject({
      'x-llm-d-inference-objective': 'interactive-reserved',
      'x-llm-d-inference-fairness-id': 'limited-team',
    });
    expect(first.ctx.forwardedHeaders()['x-llm-d-inference-objective']).toBe('interactive-reserved');
    expect(await db.redis.get('quota:userid:limited-team')).toBe('1');

    const second = request({ headers: spoof, body: CHAT });
    expect(await step.execute(second.ctx)).toBeUndefined();
    expect(second.ctx.headers['x-llm-d-inference-objective']).toBe('interactive-overflow');
    expect(second.ctx.headers['x-llm-d-inference-fairness-id']).toBe('limited-team');

    first.abort();
    let again = '';
    for (let i = 0; i < 20 && again !== 'interactive-reserved'; i++) {
      await sleep(100);
      const third = request({ headers: spoof, body: CHAT });
      await step.execute(third.ctx);
      again = third.ctx.headers['x-llm-d-inference-objective']!;
      if (again === 'interactive-reserved') third.abort();
    }
    expect(again).toBe('interactive-reserved');

    const free = request({ headers: { 'X-AP-Mode': 'passthrough', 'X-Team': 'team-free' }, body: CHAT });
    await step.execute(free.ctx);
    expect(free.ctx.stampedHeaders()).toEqual({
      'x-llm-d-inference-objective': 'interactive-reserved',
      'x-llm-d-inference-fairness-id': 'team-free',
    });
    expect(await db.redis.exists('quota:userid:team-free')).toBe(0);
  });

  test('the quota counter carries the window TTL', async () => {
    const { step } = build({ ...base(), quota: { limits: { 'limited-team': 5 }, window_seconds: 120 } });
    await step.execute(request({ headers: { 'X-AP-Mode': 'passthrough', 'X-Team': 'limited-team' }, body: CHAT }).ctx);
    const ttl = await db.redis.ttl('quota:userid:limited-team');
    expect(ttl).toBeGreaterThan(100);
    expect(ttl).toBeLessThanOrEqual(120);
  });

  test('limit 2 with 3 concurrent requests: the third is overflow', async () => {
    const { step } = build({ ...base(), quota: { limits: { acme: 2 } } });
    const reqs = [1, 2, 3].map(() => request({ headers: { 'X-AP-Mode': 'passthrough', 'X-Team': 'acme' }, body: CHAT }));
    for (const r of reqs) await step.execute(r.ctx);
    expect(reqs.map((r) => r.ctx.headers['x-llm-d-inference-objective'])).toEqual([
      'interactive-reserved',
      'interactive-reserved',
      'interactive-overflow',
    ]);
  });

  test('a tier without objectives clears a client objective; deprecated aliases are cleared too', async () => {
    const { step } = build({ ...base(), objectives: {} });
    const { ctx } = request({
      headers: { 'X-AP-Mode': 'passthrough', 'x-llm-d-inference-objective': 'premium', 'x-gateway-inference-objective': 'premium' },
      body: CHAT,
    });
    await step.execute(ctx);
    expect(ctx.headers['x-llm-d-inference-objective']).toBe('');
    expect(ctx.headers['x-gateway-inference-objective']).toBe('');
    expect(ctx.headers['x-llm-d-inference-fairness-id']).toBe('default');
  });

  test('a Redis error fails open as reserved (TestAsyncQuotaFailsOpen)', async () => {
    await db.redis.zadd('quota:userid:limited-team', 1, 'x'); // WRONGTYPE for the counter script
    const { step } = build(base());
    const { ctx } = request({ headers: { 'X-AP-Mode': 'passthrough', 'X-Team': 'limited-team' }, body: CHAT });
    expect(await step.execute(ctx)).toBeUndefined();
    expect(ctx.headers['x-llm-d-inference-objective']).toBe('interactive-reserved');
  });
});

describe('routes (TestAsyncBrokerRoutes, TestAsyncBrokerFetchGraceConfig)', () => {
  test('GET /v1/models lists the routed models', async () => {
    const { routes } = build({
      ...base(),
      routes: [{ model: 'test-model', queue: 'q' }, { queue: 'catch-all' }, { model: 'test-model', tenant: 't' }, { model: 'm2' }],
    });
    const r = await route(routes, 'GET', '/v1/models');
    expect(r.status).toBe(200);
    expect(text(r)).toBe(
      '{"data":[{"id":"test-model","object":"model","owned_by":"llm-d-async"},{"id":"m2","object":"model","owned_by":"llm-d-async"}],"object":"list"}\n',
    );
  });

  test('GET /v1/models without routed models is not answered by the step: it passes through to decode', async () => {
    const { routes } = build({ ...base(), routes: [{ queue: 'catch-all' }, { tenant: 't', queue: 'q' }] });
    expect(routes.filter((r) => r.method === 'GET' && r.match('/v1/models'))).toEqual([]);
    // The result routes are still the step's.
    expect(routes.filter((r) => r.method === 'GET' && r.match('/v1/requests/abc'))).toHaveLength(1);
  });

  test('unknown id -> 410 UNKNOWN_REQUEST', async () => {
    const { routes } = build(base());
    const r = await route(routes, 'GET', '/v1/requests/nope', { 'X-Team': 'team-a' });
    expect(r.status).toBe(410);
    expect(text(r)).toBe(
      '{"error":{"message":"request id is unknown, expired, or already deleted","type":"invalid_request_error","code":"UNKNOWN_REQUEST"}}\n',
    );
  });

  test('pending -> 202 for the owner, 410 for another tenant', async () => {
    const { routes } = build(base());
    await db.redis.set('request-active:team-a:pending-id', 'tok');
    const mine = await route(routes, 'GET', '/v1/requests/pending-id', { 'X-Team': 'team-a' });
    expect(mine.status).toBe(202);
    expect(text(mine)).toBe('{"id":"pending-id","status":"pending"}\n');
    expect(mine.headers['x-request-id']).toBeUndefined();
    expect((await route(routes, 'GET', '/v1/requests/pending-id', { 'X-Team': 'team-b' })).status).toBe(410);
  });

  test('a stored result -> 200 verbatim, TTL shrunk to the grace; another tenant -> 410', async () => {
    const { routes } = build(base());
    await db.redis.lpush(
      'results:req:team-a:ready-id',
      JSON.stringify({ id: 'team-a:ready-id', status_code: 200, payload: '{"object":"chat.completion","x":"<b>"}' }),
    );
    await db.redis.expire('results:req:team-a:ready-id', 3600);
    expect((await route(routes, 'GET', '/v1/requests/ready-id', { 'X-Team': 'team-b' })).status).toBe(410);
    const r = await route(routes, 'GET', '/v1/requests/ready-id', { 'X-Team': 'team-a' });
    expect(r.status).toBe(200);
    expect(r.headers).toEqual({ 'content-type': 'application/json' });
    expect(text(r)).toBe('{"object":"chat.completion","x":"<b>"}');
    const ttl = await db.redis.ttl('results:req:team-a:ready-id');
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60);
    // Fetch is repeatable within the grace.
    expect((await route(routes, 'GET', '/v1/requests/ready-id', { 'X-Team': 'team-a' })).status).toBe(200);
  });

  test('the newest entry wins', async () => {
    const { routes } = build(base());
    await db.redis.lpush('results:req:default:two', JSON.stringify({ id: 'default:two', status_code: 500, payload: 'old' }));
    await db.redis.lpush('results:req:default:two', JSON.stringify({ id: 'default:two', status_code: 200, payload: 'new' }));
    expect(text(await route(routes, 'GET', '/v1/requests/two'))).toBe('new');
  });

  test('custom grace shrinks the TTL; zero grace deletes on delivery', async () => {
    const five = build({ ...base(), fetch_grace_seconds: 5 });
    await db.redis.lpush('results:req:default:g5', JSON.stringify({ id: 'default:g5', status_code: 200, payload: 'ok' }));
    expect((await route(five.routes, 'GET', '/v1/requests/g5')).status).toBe(200);
    const ttl = await db.redis.ttl('results:req:default:g5');
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(5);

    const zero = build({ ...base(), fetch_grace_seconds: 0 });
    await db.redis.lpush('results:req:default:g0', JSON.stringify({ id: 'default:g0', status_code: 200, payload: 'ok' }));
    expect((await route(zero.routes, 'GET', '/v1/requests/g0')).status).toBe(200);
    expect(await db.redis.exists('results:req:default:g0')).toBe(0);
  });

  test.each<[string, Record<string, unknown>, number, Record<string, string> | null]>([
    [
      'DEADLINE_EXCEEDED',
      { error_code: 'DEADLINE_EXCEEDED', error_message: 'deadline exceeded', payload: '{"error":"deadline exceeded"}' },
      504,
      { message: 'deadline exceeded', type: 'timeout_error', code: 'DEADLINE_EXCEEDED' },
    ],
    [
      'GATE_DROPPED',
      { error_code: 'GATE_DROPPED', error_message: 'dropped' },
      429,
      { message: 'dropped', type: 'rate_limit_error', code: 'GATE_DROPPED' },
    ],
    [
      'INVALID_REQUEST',
      { error_code: 'INVALID_REQUEST', error_message: 'bad' },
      400,
      { message: 'bad', type: 'invalid_request_error', code: 'INVALID_REQUEST' },
    ],
    [
      'CANCELLED',
      { error_code: 'CANCELLED', error_message: 'cancelled' },
      499,
      { message: 'cancelled', type: 'cancelled', code: 'CANCELLED' },
    ],
    [
      'INFERENCE_ERROR',
      { error_code: 'INFERENCE_ERROR', error_message: 'Failed to send' },
      502,
      { message: 'Failed to send', type: 'api_error', code: 'INFERENCE_ERROR' },
    ],
    ['tier-priority gate drop', { payload: '{"error": "Too Many Requests", "code": 429}' }, 502, { message: '', type: 'api_error' }],
    [
      'status out of range',
      { status_code: 999, payload: 'x' },
      502,
      { message: 'stored result carries invalid status code 999', type: 'api_error', code: 'MALFORMED_RESULT' },
    ],
    ['a stored 503 is mirrored', { status_code: 503, payload: 'busy' }, 503, null],
  ])('stored %s', async (_label, stored, status, error) => {
    const { routes } = build(base());
    await db.redis.lpush('results:req:default:r1', JSON.stringify({ id: 'default:r1', ...stored }));
    const r = await route(routes, 'GET', '/v1/requests/r1');
    expect(r.status).toBe(status);
    expect(r.headers['content-type']).toBe('application/json');
    if (error) expect(json(r)).toEqual({ error });
    else expect(text(r)).toBe('busy');
  });

  test('a mailbox entry that is not JSON -> 502 MALFORMED_RESULT, not a crash', async () => {
    const { routes } = build(base());
    await db.redis.lpush('results:req:default:junk', 'not json');
    const r = await route(routes, 'GET', '/v1/requests/junk');
    expect(r.status).toBe(502);
    expect(json(r)['error']).toMatchObject({ code: 'MALFORMED_RESULT' });
  });

  test('DELETE -> 204 and the mailbox is gone; another tenant deletes nothing', async () => {
    const { routes } = build(base());
    await db.redis.lpush('results:req:team-a:ready-id', '{"id":"team-a:ready-id","status_code":200,"payload":"x"}');
    const other = await route(routes, 'DELETE', '/v1/requests/ready-id', { 'X-Team': 'team-b' });
    expect(other.status).toBe(204);
    expect(await db.redis.exists('results:req:team-a:ready-id')).toBe(1);
    const r = await route(routes, 'DELETE', '/v1/requests/ready-id', { 'X-Team': 'team-a' });
    expect(r.status).toBe(204);
    expect(text(r)).toBe('');
    expect(await db.redis.exists('results:req:team-a:ready-id')).toBe(0);
  });

  test('DELETE of a queued id stamps its cancel marker (later revision)', async () => {
    const { step, routes } = build(base());
    await respond(step, request({ headers: { 'X-AP-Mode': 'enqueue', 'x-request-id': 'queued-1', 'X-Team': 'team-a' }, body: CHAT }).ctx);
    const token = await db.redis.get('request-active:team-a:queued-1');
    expect((await route(routes, 'DELETE', '/v1/requests/queued-1', { 'X-Team': 'team-a' })).status).toBe(204);
    expect(await db.redis.get('request-cancel:team-a:queued-1')).toBe(token);
  });

  test.each([
    ['GET', '/v1/requests/bad%20id'],
    ['GET', '/v1/requests/' + 'a'.repeat(129)],
    ['DELETE', '/v1/requests/a.b'],
  ])('%s %s -> 400 invalid id (later revision)', async (method, path) => {
    const { routes } = build(base());
    const r = await route(routes, method, path);
    expect(r.status).toBe(400);
    expect(json(r)).toEqual({
      error: {
        message: 'request id must be 1-128 alphanumeric or dash characters',
        type: 'invalid_request_error',
        code: 'INVALID_REQUEST',
      },
    });
  });

  test('a tenant with ":" -> 400 on GET and DELETE', async () => {
    const { routes } = build(base());
    for (const method of ['GET', 'DELETE']) {
      const r = await route(routes, method, '/v1/requests/abc', { 'X-Team': 'a:b' });
      expect(r.status).toBe(400);
      expect(json(r)['error']).toMatchObject({ message: 'X-Team must not contain ":"' });
    }
  });

  test('only /v1/requests/<one segment> is matched', () => {
    const { routes } = build(base());
    const fetch = routes.find((r) => r.method === 'GET' && r.match('/v1/requests/x'))!;
    expect(fetch.match('/v1/requests/abc-123')).toEqual({ id: 'abc-123' });
    expect(fetch.match('/v1/requests/')).toBeNull();
    expect(fetch.match('/v1/requests/a/b')).toBeNull();
    expect(fetch.match('/v1/requestsx/a')).toBeNull();
  });
});
