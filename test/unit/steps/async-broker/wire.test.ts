/**
 * The Redis contract with llm-d-async, byte for byte (reference async-broker.md §1, §8): the submit
 * transaction, key names, envelope fields and types, score, token, TTLs, and the Lua scripts.
 */
import { buildEnvelope } from '../../../../src/steps/async-broker/envelope';
import { goEncode } from '../../../../src/steps/async-broker/go-json';
import { keyspaceChannel, quotaKey, requestKeys } from '../../../../src/steps/async-broker/keys';
import { CLEANUP_REQUEST_STATE, MARK_CANCELLED, QUOTA_ACQUIRE, QUOTA_RELEASE, UNCANCEL } from '../../../../src/steps/async-broker/scripts';
import { notificationsEnabled } from '../../../../src/steps/async-broker/wakeup';
import { build, request, respond, useRedis } from './harness';

const db = useRedis();

const CHAT = { model: 'Qwen/Qwen3-0.6B', messages: [{ role: 'user', content: 'a <b> & c' }], max_tokens: 5 };

describe('key names', () => {
  test('tenant-scoped keys, the keyspace channel and the quota key', () => {
    expect(requestKeys('acme', 'job-4217')).toEqual({
      envelopeId: 'acme:job-4217',
      mailbox: 'results:req:acme:job-4217',
      active: 'request-active:acme:job-4217',
      cancel: 'request-cancel:acme:job-4217',
    });
    expect(keyspaceChannel(0, 'results:req:acme:job-4217')).toBe('__keyspace@0__:results:req:acme:job-4217');
    expect(quotaKey('quota:', 'userid', 'acme')).toBe('quota:userid:acme');
  });
});

describe('envelope', () => {
  test('field order, names and types match the producer', () => {
    const member = buildEnvelope({
      token: '9f1c0000000000000000000000000000',
      envelopeId: 'acme:job-4217',
      queue: 'team-a-queue',
      resultQueue: 'results:req:acme:job-4217',
      created: 1755800000,
      deadline: 1755800060,
      payload: { messages: [], model: 'Qwen/Qwen3-0.6B' },
      metadata: { userid: 'acme', traceparent: '00-abc-01' },
      headers: { 'x-llm-d-slo-ttft-ms': '800' },
      endpoint: '/v1/chat/completions',
    });
    expect(member).toBe(
      '{"internal":{"request_token":"9f1c0000000000000000000000000000","request_queue_name":"team-a-queue","result_queue_name":"results:req:acme:job-4217"},' +
        '"request_kind":"redis",' +
        '"data":{"id":"acme:job-4217","created":1755800000,"deadline":1755800060,"payload":{"messages":[],"model":"Qwen/Qwen3-0.6B"},' +
        '"metadata":{"traceparent":"00-abc-01","userid":"acme"},"headers":{"x-llm-d-slo-ttft-ms":"800"},"endpoint":"/v1/chat/completions",' +
        '"request_queue_name":"team-a-queue","result_queue_name":"results:req:acme:job-4217"}}',
    );
  });

  test('headers is omitted when nothing is forwarded; a float deadline is refused', () => {
    const input = {
      token: 't',
      envelopeId: 'd:x',
      queue: 'q',
      resultQueue: 'results:req:d:x',
      created: 1,
      deadline: 2,
      payload: {},
      metadata: { userid: 'd' },
      headers: {},
      endpoint: '/v1/completions',
    };
    expect(JSON.parse(buildEnvelope(input)).data).not.toHaveProperty('headers');
    expect(() => buildEnvelope({ ...input, deadline: 2.5 })).toThrow(/integer/);
  });

  test('an enqueue writes exactly the three keys, with the reference TTLs, score and token', async () => {
    const { step } = build({ redis_url: db.server.url(), wakeup_mode: 'poll', default_queue: 'team-a-queue' });
    const { ctx } = request({
      headers: {
        'x-request-id': 'job-4217',
        'x-ap-mode': 'enqueue',
        'x-team': 'acme',
        'x-request-timeout-seconds': '60',
        traceparent: '00-abc-01',
        'x-llm-d-slo-tpot-ms': '50',
      },
      body: CHAT,
    });
    const now = Date.now();
    expect((await respond(step, ctx)).status).toBe(202);

    expect((await db.redis.keys('*')).sort()).toEqual(['request-active:acme:job-4217', 'team-a-queue']);
    const [member, score] = await db.redis.zrange('team-a-queue', 0, -1, 'WITHSCORES');
    // Integer created/deadline in the raw bytes: a float would make the AP drop the message.
    expect(member).toMatch(/"created":\d+,"deadline":\d+,/);
    const env = JSON.parse(member!);
    expect(Object.keys(env)).toEqual(['internal', 'request_kind', 'data']);
    expect(Object.keys(env.internal)).toEqual(['request_token', 'request_queue_name', 'result_queue_name']);
    expect(Object.keys(env.data)).toEqual([
      'id',
      'created',
      'deadline',
      'payload',
      'metadata',
      'headers',
      'endpoint',
      'request_queue_name',
      'result_queue_name',
    ]);
    expect(env.request_kind).toBe('redis');
    expect(env.internal).toEqual({
      request_token: expect.stringMatching(/^[0-9a-f]{32}$/),
      request_queue_name: 'team-a-queue',
      result_queue_name: 'results:req:acme:job-4217',
    });
    expect(env.data).toMatchObject({
      id: 'acme:job-4217',
      payload: CHAT,
      metadata: { traceparent: '00-abc-01', userid: 'acme' },
      headers: { 'x-llm-d-slo-tpot-ms': '50' },
      endpoint: '/v1/chat/completions',
      request_queue_name: 'team-a-queue',
      result_queue_name: 'results:req:acme:job-4217',
    });
    expect(env.data.created).toBe(Math.floor(now / 1000));
    expect(env.data.deadline).toBe(Math.floor(now / 1000 + 60));
    expect(Number(score)).toBe(env.data.deadline);

    expect(await db.redis.get('request-active:acme:job-4217')).toBe(env.internal.request_token);
    const pttl = await db.redis.pttl('request-active:acme:job-4217');
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(env.data.deadline * 1000 - now);
  });

  test('each submit mints a fresh token', async () => {
    const { step } = build({ redis_url: db.server.url(), wakeup_mode: 'poll' });
    await respond(step, request({ headers: { 'x-ap-mode': 'enqueue' }, body: CHAT }).ctx);
    await respond(step, request({ headers: { 'x-ap-mode': 'enqueue' }, body: CHAT }).ctx);
    const tokens = (await db.redis.zrange('request-sortedset', 0, -1)).map((m) => JSON.parse(m).internal.request_token as string);
    expect(new Set(tokens).size).toBe(2);
  });
});

describe('submit transaction', () => {
  test('MULTI; DEL cancel; SET active token PX ms; ZADD queue deadline member; EXEC', async () => {
    const { step } = build({ redis_url: db.server.url(), wakeup_mode: 'poll' });
    const monitor = await db.redis.monitor();
    const seen: string[][] = [];
    monitor.on('monitor', (_time: string, args: string[]) => seen.push(args));
    // A fresh id (no client id): no reattach lookup precedes the submit.
    const { ctx } = request({ headers: { 'x-ap-mode': 'enqueue', 'x-team': 't1' }, body: CHAT });
    await respond(step, ctx);
    await new Promise((r) => setTimeout(r, 100));
    monitor.disconnect();
    const cmds = seen.filter((a) => a[0]?.toLowerCase() !== 'info' && a[0]?.toLowerCase() !== 'ping');
    const id = `t1:${ctx.requestId}`;
    expect(cmds.map((a) => a[0]!.toLowerCase())).toEqual(['multi', 'del', 'set', 'zadd', 'exec']);
    expect(cmds[1]).toEqual(['del', `request-cancel:${id}`]);
    const [, activeKey, token, px, ms] = cmds[2]!;
    expect([activeKey, px!.toUpperCase()]).toEqual([`request-active:${id}`, 'PX']);
    expect(token).toMatch(/^[0-9a-f]{32}$/);
    expect(Number(ms)).toBeGreaterThan(0);
    expect(cmds[3]!.slice(0, 2)).toEqual(['zadd', 'request-sortedset']);
    expect(Number(cmds[3]![2])).toBe(JSON.parse(cmds[3]![3]!).data.deadline);
  });

  test('a submit clears a stale cancel marker (TestSubmitRequest_ClearsStaleCancellationMarker)', async () => {
    await db.redis.set('request-cancel:default:again-1', 'old-token');
    const { step } = build({ redis_url: db.server.url(), wakeup_mode: 'poll' });
    await respond(step, request({ headers: { 'x-ap-mode': 'enqueue', 'x-request-id': 'again-1' }, body: CHAT }).ctx);
    expect(await db.redis.exists('request-cancel:default:again-1')).toBe(0);
  });

  test('a failed ZADD answers 503 and leaves no marker behind (nothing half-written)', async () => {
    await db.redis.set('request-sortedset', 'not a zset');
    const { step } = build({ redis_url: db.server.url(), wakeup_mode: 'poll' });
    const r = await respond(step, request({ headers: { 'x-ap-mode': 'enqueue', 'x-request-id': 'half-1' }, body: CHAT }).ctx);
    expect(r.status).toBe(503);
    expect(r.headers['x-request-id']).toBe('half-1');
    expect(JSON.parse((r.body as Buffer).toString())).toEqual({
      error: { message: 'failed to enqueue request', type: 'api_error', code: 'ENQUEUE_FAILED' },
    });
    expect(await db.redis.exists('request-active:default:half-1')).toBe(0);
  });
});

describe('Lua scripts', () => {
  const run = (script: string, keys: string[], args: Array<string | number>) => db.redis.eval(script, keys.length, ...keys, ...args);

  test('quota acquire counts up to the limit and sets the window TTL; release never goes below 0', async () => {
    expect(await run(QUOTA_ACQUIRE, ['quota:userid:a'], [2, 300])).toBe(1);
    expect(await run(QUOTA_ACQUIRE, ['quota:userid:a'], [2, 300])).toBe(1);
    expect(await run(QUOTA_ACQUIRE, ['quota:userid:a'], [2, 300])).toBe(0);
    expect(await db.redis.get('quota:userid:a')).toBe('2');
    expect(await db.redis.ttl('quota:userid:a')).toBeGreaterThan(290);
    await run(QUOTA_RELEASE, ['quota:userid:a'], [300]);
    await run(QUOTA_RELEASE, ['quota:userid:a'], [300]);
    await run(QUOTA_RELEASE, ['quota:userid:a'], [300]);
    expect(await db.redis.get('quota:userid:a')).toBe('0');
    await run(QUOTA_RELEASE, ['quota:userid:missing'], [300]);
    expect(await db.redis.exists('quota:userid:missing')).toBe(0);
  });

  test('release stops refreshing the TTL once the count reaches 0', async () => {
    await db.redis.set('quota:userid:b', '1', 'EX', 5);
    await run(QUOTA_RELEASE, ['quota:userid:b'], [300]);
    expect(await db.redis.ttl('quota:userid:b')).toBeLessThanOrEqual(5);
  });

  test('cancel copies the live token with a 7-day TTL; nothing active is a no-op (TestCancelRequests*)', async () => {
    expect(await run(MARK_CANCELLED, ['request-active:t:x', 'request-cancel:t:x'], [604800])).toBe(0);
    expect(await db.redis.exists('request-cancel:t:x')).toBe(0);
    await db.redis.set('request-active:t:x', 'tok1');
    expect(await run(MARK_CANCELLED, ['request-active:t:x', 'request-cancel:t:x'], [604800])).toBe(1);
    expect(await db.redis.get('request-cancel:t:x')).toBe('tok1');
    expect(await db.redis.ttl('request-cancel:t:x')).toBe(604800);
  });

  test('un-cancel clears the marker only while it equals the live token', async () => {
    await db.redis.set('request-active:t:y', 'new');
    await db.redis.set('request-cancel:t:y', 'old');
    expect(await run(UNCANCEL, ['request-active:t:y', 'request-cancel:t:y'], [])).toBe(0);
    expect(await db.redis.get('request-cancel:t:y')).toBe('old');
    await db.redis.set('request-cancel:t:y', 'new');
    expect(await run(UNCANCEL, ['request-active:t:y', 'request-cancel:t:y'], [])).toBe(1);
    expect(await db.redis.exists('request-cancel:t:y')).toBe(0);
  });

  test('AP cleanup is compare-and-delete: an old generation never clears a newer one', async () => {
    await db.redis.set('request-active:t:z', 'gen2');
    await db.redis.set('request-cancel:t:z', 'gen2');
    expect(await run(CLEANUP_REQUEST_STATE, ['request-active:t:z', 'request-cancel:t:z'], ['gen1'])).toBe(1);
    expect(await db.redis.get('request-active:t:z')).toBe('gen2');
    expect(await db.redis.get('request-cancel:t:z')).toBe('gen2');
    expect(await run(CLEANUP_REQUEST_STATE, ['request-active:t:z', 'request-cancel:t:z'], [''])).toBe(0);
    await run(CLEANUP_REQUEST_STATE, ['request-active:t:z', 'request-cancel:t:z'], ['gen2']);
    expect(await db.redis.exists('request-active:t:z', 'request-cancel:t:z')).toBe(0);
  });
});

describe('step-written bodies', () => {
  test('Go encoder bytes: HTML-safe escaping and a trailing newline', () => {
    expect(goEncode({ error: { message: 'a<b>&c\u2028', type: 'x' } }).toString()).toBe(
      '{"error":{"message":"a\\u003cb\\u003e\\u0026c\\u2028","type":"x"}}\n',
    );
  });
});

describe('keyspace notifications', () => {
  test.each([
    ['Kl', true],
    ['KA', true],
    ['AK', true],
    ['Elg', false],
    ['K', false],
    ['', false],
  ])('notify-keyspace-events %j -> %p', (flags, want) => {
    expect(notificationsEnabled(flags)).toBe(want);
  });
});
