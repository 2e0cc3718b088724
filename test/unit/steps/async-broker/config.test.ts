/**
 * Params, deadlines and routing (upstream TestAsyncBrokerConfigValidation, DeadlineClamping,
 * RouteMatching, UnroutedDedup, and the later revision's validation and must-run-first rule).
 */
import { ConfigError } from '../../../../src/config/errors';
import { assertAsyncBrokerFirst } from '../../../../src/steps/async-broker';
import { parseAsyncBrokerConfig } from '../../../../src/steps/async-broker/config';
import { computeDeadline, parseTimeoutHeader, resolveTimeoutSeconds } from '../../../../src/steps/async-broker/deadline';
import { parseRedisUrl } from '../../../../src/steps/async-broker/redis-url';
import { parseRedisTarget } from '../../../../src/steps/async-broker/redis-topology';
import { hashTagOf, keySlot } from '../../../../src/steps/async-broker/key-slot';
import { routeFor, UnroutedModels } from '../../../../src/steps/async-broker/routing';
import { build, closeAll } from './harness';

const URL = 'redis://127.0.0.1:6379/0';

afterAll(closeAll);

function rejects(params: Record<string, unknown>, text: string): void {
  let err: unknown;
  try {
    parseAsyncBrokerConfig(params);
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(ConfigError);
  expect((err as Error).message.toLowerCase()).toContain(text.toLowerCase());
}

describe('config validation', () => {
  test.each<[string, Record<string, unknown>, string]>([
    ['missing redis_url', {}, 'redis_url is required'],
    ['unknown wakeup_mode', { redis_url: URL, wakeup_mode: 'sometimes' }, 'wakeup_mode'],
    ['unknown key', { redis_url: URL, bogus_key: 1 }, 'bogus_key'],
    ['mode header forwarded (any case)', { redis_url: URL, forward_headers: ['x-ap-mode'] }, 'forward_headers'],
    ['fairness header forwarded', { redis_url: URL, forward_headers: ['x-llm-d-inference-fairness-id'] }, 'forward_headers'],
    ['objective header forwarded', { redis_url: URL, forward_headers: ['X-LLM-D-Inference-Objective'] }, 'forward_headers'],
    ['timeouts key other than enqueue/wait', { redis_url: URL, timeouts: { passthrough: { max_seconds: 5 } } }, 'timeouts'],
    ['default above max', { redis_url: URL, timeouts: { wait: { default_seconds: 10, max_seconds: 5 } } }, 'timeouts.wait'],
    ['negative timeout (later revision)', { redis_url: URL, timeouts: { wait: { default_seconds: -5 } } }, 'timeouts.wait'],
    ['unknown timeouts field', { redis_url: URL, timeouts: { wait: { default: 5 } } }, 'timeouts.wait.default'],
    ['negative wait_cap_seconds', { redis_url: URL, wait_cap_seconds: -1 }, 'wait_cap_seconds'],
    ['negative fetch_grace_seconds', { redis_url: URL, fetch_grace_seconds: -1 }, 'fetch_grace_seconds'],
    ['negative quota window', { redis_url: URL, quota: { window_seconds: -1 } }, 'quota.window_seconds'],
    ['negative quota limit', { redis_url: URL, quota: { limits: { 'team-a': -1 } } }, 'quota.limits.team-a'],
    ['unknown quota key', { redis_url: URL, quota: { limit: 3 } }, 'quota.limit'],
    ['unknown route key', { redis_url: URL, routes: [{ model: 'm', pool: 'x' }] }, 'routes[0].pool'],
    ['unknown objectives key', { redis_url: URL, objectives: { t: { reserved: 'a', spare: 'b' } } }, 'objectives.t.spare'],
    ['non-integer', { redis_url: URL, wait_cap_seconds: 1.5 }, 'wait_cap_seconds'],
    ['bad URL scheme', { redis_url: 'http://127.0.0.1:6379' }, 'redis_url'],
    ['unknown URL option', { redis_url: 'redis://127.0.0.1:6379/0?frobnicate=1' }, 'unexpected option'],
    ['bad header name', { redis_url: URL, tenant_header: 'X Team' }, 'tenant_header'],
  ])('%s is rejected', (_label, params, text) => rejects(params, text));

  test('a bad redis_url never echoes the URL (it may hold a password)', () => {
    expect(() => parseAsyncBrokerConfig({ redis_url: 'redis://user:s3cret@127.0.0.1:6379/zz' })).toThrow(/redis_url/);
    try {
      parseAsyncBrokerConfig({ redis_url: 'redis://user:s3cret@127.0.0.1:6379/zz' });
    } catch (e) {
      expect((e as Error).message).not.toContain('s3cret');
    }
  });

  test('the builder-injected kv_connector, ec_connector and use_openai_format are accepted', () => {
    const { step } = build({ redis_url: URL, kv_connector: 'nixlv2', ec_connector: 'ec-example', use_openai_format: false });
    expect(step.type).toBe('async-broker');
  });

  test('defaults', () => {
    const c = parseAsyncBrokerConfig({ redis_url: URL });
    expect(c).toMatchObject({
      modeHeader: 'x-ap-mode',
      tenantHeader: 'x-team',
      timeoutHeader: 'x-request-timeout-seconds',
      waitCapSeconds: 0,
      fetchGraceSeconds: 60,
      defaultQueue: 'request-sortedset',
      defaultTier: '',
      objectiveHeader: 'x-llm-d-inference-objective',
      fairnessHeader: 'x-llm-d-inference-fairness-id',
      forwardHeaders: ['x-llm-d-slo-ttft-ms', 'x-llm-d-slo-tpot-ms'],
      wakeupMode: 'auto',
    });
    expect(c.quota).toMatchObject({ prefix: 'quota:', attribute: 'userid', windowSeconds: 300 });
    expect(c.redis).toMatchObject({ host: '127.0.0.1', port: 6379, db: 0, tls: false });
  });

  test('an explicit empty forward_headers forwards nothing; null takes the default', () => {
    expect(parseAsyncBrokerConfig({ redis_url: URL, forward_headers: [] }).forwardHeaders).toEqual([]);
    expect(parseAsyncBrokerConfig({ redis_url: URL, forward_headers: null }).forwardHeaders).toEqual([
      'x-llm-d-slo-ttft-ms',
      'x-llm-d-slo-tpot-ms',
    ]);
  });

  test('fetch_grace_seconds 0 is kept (delete on delivery); window 0 means the default', () => {
    const c = parseAsyncBrokerConfig({ redis_url: URL, fetch_grace_seconds: 0, quota: { window_seconds: 0 } });
    expect(c.fetchGraceSeconds).toBe(0);
    expect(c.quota.windowSeconds).toBe(300);
  });
});

describe('redis_url', () => {
  test('go-redis syntax: credentials, db, timeouts, TLS', () => {
    expect(parseRedisUrl('rediss://u:p%40ss@10.0.0.1:6380/3?dial_timeout=2s&read_timeout=4&pool_size=10')).toMatchObject({
      host: '10.0.0.1',
      port: 6380,
      db: 3,
      tls: true,
      username: 'u',
      password: 'p@ss',
      connectTimeoutMs: 2000,
      commandTimeoutMs: 4000,
    });
    expect(parseRedisUrl('redis://[::1]:7000').host).toBe('::1');
    expect(parseRedisUrl('redis://localhost').port).toBe(6379);
    expect(parseRedisTarget('redis://localhost').topology).toEqual({ kind: 'single' });
  });

  test('Sentinel: comma-separated sentinels, the master name, an optional db, sentinel credentials', () => {
    const t = parseRedisTarget(
      'rediss-sentinel://u:p%40ss@10.0.0.1:26380,[::1],10.0.0.3:26381/my-master/2?sentinel_password=s3&dial_timeout=1s',
    );
    expect(t).toMatchObject({ db: 2, tls: true, username: 'u', password: 'p@ss', connectTimeoutMs: 1000 });
    expect(t.topology).toEqual({
      kind: 'sentinel',
      masterName: 'my-master',
      sentinels: [
        { host: '10.0.0.1', port: 26380 },
        { host: '::1', port: 26379 },
        { host: '10.0.0.3', port: 26381 },
      ],
      sentinelPassword: 's3',
    });
    const c = parseAsyncBrokerConfig({ redis_url: 'redis-sentinel://127.0.0.1:26379/mymaster' });
    // A failover is expected here: enqueues wait for one replica by default; upstream's key names are kept.
    expect([c.ackReplicas, c.ackTimeoutMs, c.keyLayout]).toEqual([1, 1000, 'llm-d-async']);
  });

  test('Cluster: comma-separated seed nodes, DB 0 only, hash-tagged keys, polling for results', () => {
    const t = parseRedisTarget('redis-cluster://10.0.0.1:7000,10.0.0.2?read_timeout=5s');
    expect(t.topology).toEqual({
      kind: 'cluster',
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: '10.0.0.2', port: 6379 },
      ],
    });
    expect(t.commandTimeoutMs).toBe(5000);
    const c = parseAsyncBrokerConfig({ redis_url: 'redis-cluster://127.0.0.1:7000', wakeup_mode: 'auto' });
    expect([c.ackReplicas, c.keyLayout, c.wakeupMode]).toEqual([1, 'cluster', 'poll']);
    expect(parseAsyncBrokerConfig({ redis_url: URL }).ackReplicas).toBe(0);
  });

  test.each([
    ['redis-sentinel://127.0.0.1:26379', 'master-name'],
    ['redis-sentinel://127.0.0.1:26379/m/x', 'database'],
    ['redis-sentinel:///m', 'no sentinel address'],
    ['redis-cluster://127.0.0.1:7000/1', 'no database path'],
    ['redis-cluster://127.0.0.1:7000?db=2', 'DB 0 only'],
    ['redis-cluster://127.0.0.1:7000?sentinel_password=x', 'unexpected option'],
    ['redis-cluster://127.0.0.1:x', 'invalid host'],
    ['redis-cluster://u:secret@127.0.0.1:7000?bogus=1', 'unexpected option'],
  ])('%s is refused (%s), never echoing the URL', (url, text) => {
    rejects({ redis_url: url }, text);
    let msg = '';
    try {
      parseAsyncBrokerConfig({ redis_url: url });
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).not.toContain('secret');
  });

  test.each([
    [{ redis_url: 'redis-cluster://127.0.0.1:7000', wakeup_mode: 'notify' }, 'wakeup_mode'],
    [{ redis_url: 'redis-sentinel://127.0.0.1:1/m', ack_timeout_ms: 0 }, 'ack_timeout_ms'],
    [{ redis_url: 'redis-sentinel://127.0.0.1:1/m?read_timeout=1s', ack_timeout_ms: 1000 }, 'ack_timeout_ms'],
    [{ redis_url: URL, ack_replicas: -1 }, 'ack_replicas'],
    [{ redis_url: URL, queue_metrics: 'yes' }, 'queue_metrics'],
  ])('%j is refused (%s)', (params, key) => rejects(params, key));

  test('key slots follow the hash tag, as CRC16 mod 16384 (values from redis-cli CLUSTER KEYSLOT)', () => {
    expect(keySlot('foo')).toBe(12182);
    expect(keySlot('request-sortedset')).toBe(keySlot('{request-sortedset}.x'));
    expect(hashTagOf('request-active:{acme:job-1}')).toBe('acme:job-1');
    expect(hashTagOf('a{}b')).toBe('a{}b');
  });
});

describe('deadlines (TestAsyncBrokerDeadlineClamping)', () => {
  const none = { defaultSeconds: 0, maxSeconds: 0 };
  test('unclamped when no max is configured', () => {
    expect(resolveTimeoutSeconds('enqueue', none, '1000000')).toBe(1_000_000);
  });
  test('clamped when a max is configured', () => {
    expect(resolveTimeoutSeconds('enqueue', { defaultSeconds: 0, maxSeconds: 300 }, '1000000')).toBe(300);
  });
  test('the built-in default is clamped too', () => {
    expect(resolveTimeoutSeconds('enqueue', { defaultSeconds: 0, maxSeconds: 300 }, undefined)).toBe(300);
  });
  test('a partial entry keeps the per-mode default', () => {
    expect(resolveTimeoutSeconds('enqueue', { defaultSeconds: 0, maxSeconds: 7200 }, undefined)).toBe(3600);
    expect(resolveTimeoutSeconds('wait', none, undefined)).toBe(60);
  });
  test('wait is clamped to one hour unless the default is longer (later revision)', () => {
    expect(resolveTimeoutSeconds('wait', none, '1000000')).toBe(3600);
    expect(resolveTimeoutSeconds('wait', { defaultSeconds: 7200, maxSeconds: 0 }, '1000000')).toBe(7200);
  });
  test('absurd values are capped at a year rather than overflowing', () => {
    expect(resolveTimeoutSeconds('enqueue', none, '9223372036854775807')).toBe(365 * 24 * 3600);
  });
  test.each([
    ['30', 30],
    ['+30', 30],
    ['30s', undefined],
    ['1.5', undefined],
    ['0', undefined],
    ['-5', undefined],
    [' 30', undefined],
    ['9223372036854775808', undefined],
    ['', undefined],
  ])('header %j parses as %p', (raw, want) => {
    expect(parseTimeoutHeader(raw)).toBe(want);
  });
  test('invalid header values fall back to the default', () => {
    expect(resolveTimeoutSeconds('wait', { defaultSeconds: 45, maxSeconds: 0 }, '30s')).toBe(45);
  });
  test('created and deadline are floored Unix seconds; the marker lives until the deadline', () => {
    expect(computeDeadline(1_755_800_000_400, 120)).toEqual({ created: 1_755_800_000, deadline: 1_755_800_120, ttlMs: 119_600 });
  });
});

describe('routing (TestAsyncBrokerRouteMatching)', () => {
  const routes = [
    { model: 'model-a', tenant: 'team-x', queue: 'qx', tier: 'tx' },
    { model: 'model-a', tenant: '', queue: 'qa', tier: 'ta' },
    { model: 'model-b', tenant: '', queue: 'qb', tier: '' },
  ];
  const defaults = { queue: 'default-q', tier: 'default-t' };
  test.each([
    ['model-a', 'team-x', 'qx', 'tx', true],
    ['model-a', 'team-y', 'qa', 'ta', true],
    ['model-b', 'team-x', 'qb', 'default-t', true],
    ['model-c', 'team-x', 'default-q', 'default-t', false],
  ])('(%s, %s) -> %s/%s matched=%p', (model, tenant, queue, tier, matched) => {
    expect(routeFor(routes, defaults, model, tenant)).toEqual({ queue, tier, matched });
  });
  test('a wildcard route matches everything', () => {
    expect(routeFor([{ model: '', tenant: '', queue: 'catch-all', tier: '' }], defaults, 'anything', 'anyone')).toEqual({
      queue: 'catch-all',
      tier: 'default-t',
      matched: true,
    });
  });
  test('unrouted models are reported once each, and the memory is bounded (TestAsyncBrokerUnroutedDedup)', () => {
    const u = new UnroutedModels(3);
    expect(u.firstSighting('m1')).toBe(true);
    expect(u.firstSighting('m1')).toBe(false);
    expect(u.firstSighting('m2')).toBe(true);
    expect(u.firstSighting('m3')).toBe(true);
    expect(u.firstSighting('m4')).toBe(false);
  });
});

describe('must run first (later revision)', () => {
  test('first is accepted, anywhere else is rejected with the position', () => {
    expect(() => assertAsyncBrokerFirst(['async-broker', 'render', 'decode'])).not.toThrow();
    expect(() => assertAsyncBrokerFirst(['render', 'decode'])).not.toThrow();
    expect(() => assertAsyncBrokerFirst(['render', 'async-broker'])).toThrow(/must be the first pipeline step, found it at position 2/);
  });
});
