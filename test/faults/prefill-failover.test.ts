/**
 * Prefill failover (issue #8): a prefill that cannot connect or gets a 5xx is sent again through
 * the gateway, where the load balancer (the EPP in production) picks another pod. Here the gateway's
 * prefill cluster has two endpoints, round-robin, so the retry reaches the second worker. A retry
 * never happens once decode began, nor for a 4xx or a timeout.
 */
import { startSimulator, type Simulator } from '../../sim/simulator';
import { at, TestClient } from '../../launch/client';
import { REFUSED_PORT } from '../../launch/ports';
import { withClusterEndpoints } from './support/custom-envoy';
import { startCustomStack, type CustomStack } from './support/custom-stack';
import { createPrefillStep } from '../../src/steps/prefill';
import { classify } from '../../src/pipeline/errors';
import { makeCtx, TestDeps } from '../unit/steps/fake-upstream';
import { expectIdle, expectOpenAiError, UPSTREAM_SECRET } from './support/expect';

const chat = (text: string) => ({ model: 'sim-model', messages: [{ role: 'user', content: text }], max_tokens: 3 });
let seq = 0;
const nextId = (): string => `failover-${process.pid}-${++seq}`;

describe('prefill failover through a gateway with two prefill workers', () => {
  let stack: CustomStack;
  let client: TestClient;
  let good: Simulator;
  let bad: Simulator;

  beforeAll(async () => {
    stack = await startCustomStack({ prefillWorkers: 2, kvConnector: 'kv-nixl', gatewayTimeout: '1s' });
    client = new TestClient(stack.publicUrl);
    [bad, good] = stack.prefill as [Simulator, Simulator];
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it('a 5xx from one prefill worker is retried and served by the other', async () => {
    bad.setFaults([{ status: 503, body: UPSTREAM_SECRET }]);
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const id = nextId();
      ids.push(id);
      const res = await client.post('/v1/chat/completions', chat(`retry me ${i}`), { headers: { 'x-request-id': id } });
      expect(res.status).toBe(200);
      expect(at(res.json, 'choices', 0, 'message', 'content')).toBe(`retry me ${i}`);
    }
    // Round robin sends some first attempts to the failing worker; each of those was retried on the good one.
    expect(bad.requests.length).toBeGreaterThan(0);
    const goodIds = good.requests.map((r) => r.headers['x-request-id']);
    expect(goodIds.sort()).toEqual([...ids].sort());
    for (const r of bad.requests) expect(goodIds).toContain(r.headers['x-request-id']);
    // Decode ran once per request, with the KV location the good worker answered.
    expect(stack.decode.requests).toHaveLength(4);
    await expectIdle(stack.service);
  });

  it('a reset before the answer is retried too', async () => {
    bad.setFaults([{ reset: true }]);
    for (let i = 0; i < 3; i++) {
      expect((await client.post('/v1/chat/completions', chat('reset'), { headers: { 'x-request-id': nextId() } })).status).toBe(200);
    }
    expect(bad.requests.length).toBeGreaterThan(0);
    expect(good.requests).toHaveLength(3);
  });

  it("a 4xx is the client's answer: not retried", async () => {
    bad.setFaults([{ status: 429, body: UPSTREAM_SECRET }]);
    good.setFaults([{ status: 429, body: UPSTREAM_SECRET }]);
    const res = await client.post('/v1/chat/completions', chat('four two nine'), { headers: { 'x-request-id': nextId() } });
    expectOpenAiError(res, 429);
    expect(bad.requests.length + good.requests.length).toBe(1);
    expect(stack.decode.requests).toHaveLength(0);
  });

  it('a timed-out prefill is not retried (its budget is spent)', async () => {
    bad.setFaults([{ delayMs: 1500 }]);
    good.setFaults([{ delayMs: 1500 }]);
    const res = await client.post('/v1/chat/completions', chat('slow'), { headers: { 'x-request-id': nextId() } });
    expectOpenAiError(res, 502);
    expect(bad.requests.length + good.requests.length).toBe(1);
  });

  it('two failing workers: one retry, then 502 with no upstream text', async () => {
    bad.setFaults([{ status: 500, body: UPSTREAM_SECRET }]);
    good.setFaults([{ status: 500, body: UPSTREAM_SECRET }]);
    const res = await client.post('/v1/chat/completions', chat('both down'), { headers: { 'x-request-id': nextId() } });
    expectOpenAiError(res, 502);
    expect(bad.requests).toHaveLength(1);
    expect(good.requests).toHaveLength(1);
    expect(stack.decode.requests).toHaveLength(0);
  });

  it('no retry after decode began: a failing decode leaves prefill at one call', async () => {
    stack.decode.setFaults([{ status: 500, body: 'decode says no' }]);
    const res = await client.post('/v1/chat/completions', chat('decode fails'), { headers: { 'x-request-id': nextId() } });
    // Decode is Envoy's forward: its answer reaches the client as the worker sent it (upstream
    // relays decode's answer verbatim too).
    expect(res.status).toBe(500);
    expect(bad.requests.length + good.requests.length).toBe(1);
    expect(stack.decode.requests).toHaveLength(1);

    stack.reset();
    stack.decode.setFaults([{ resetMidBody: true }]);
    await expect(client.post('/v1/chat/completions', { ...chat('cut mid body'), stream: true })).rejects.toThrow();
    expect(bad.requests.length + good.requests.length).toBe(1);
    await expectIdle(stack.service);
  });
});

describe('prefill failover: a worker that refuses connections', () => {
  let stack: CustomStack;
  let client: TestClient;

  beforeAll(async () => {
    stack = await startCustomStack({
      prefillWorkers: 1,
      kvConnector: 'kv-shared-storage',
      // The second endpoint of the prefill cluster is a port nobody listens on.
      editEnvoy: (yaml, ctx) => withClusterEndpoints(yaml, 'prefill_workers', [ctx.prefill[0]!, `127.0.0.1:${REFUSED_PORT}`]),
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });

  it('connect refused on one pod: the retry reaches the live one, every request succeeds', async () => {
    for (let i = 0; i < 4; i++) {
      expect((await client.post('/v1/chat/completions', chat(`refused ${i}`), { headers: { 'x-request-id': nextId() } })).status).toBe(200);
    }
    expect(stack.prefill[0]!.requests).toHaveLength(4);
    const stats = await stack.envoy.stats('cluster.prefill_workers.upstream_cx_connect_fail');
    expect(stats['cluster.prefill_workers.upstream_cx_connect_fail']).toBeGreaterThan(0);
  });
});

describe('the retries param', () => {
  it('retries: 0 sends one attempt; the default sends two; 5xx ends as 502', async () => {
    const sim = await startSimulator({ name: 'sim-prefill-solo', role: 'prefill' });
    sim.setFaults([{ status: 503 }]);
    const td = new TestDeps(sim.url, 1000);
    try {
      const failWith = async (params: Record<string, unknown>): Promise<number> => {
        try {
          await createPrefillStep(params, td.deps).execute(makeCtx());
          return 200;
        } catch (err) {
          return classify(err, 'r').status;
        }
      };
      expect(await failWith({ retries: 0 })).toBe(502);
      expect(sim.requests).toHaveLength(1);
      expect(await failWith({})).toBe(502);
      expect(sim.requests).toHaveLength(3);
      expect(await failWith({ retries: 3 })).toBe(502);
      expect(sim.requests).toHaveLength(7);
    } finally {
      await td.close();
      await sim.close();
    }
  });

  it.each([-1, 4, 1.5, 'one'])('rejects retries: %p at start-up', (retries) => {
    const td = new TestDeps('http://127.0.0.1:9', 1000);
    expect(() => createPrefillStep({ retries }, td.deps)).toThrow(/prefill\.params\.retries/);
    return td.close();
  });
});
