/**
 * The forward leg against a worker's keep-alive edge (issue 21 item 2; the soak's 503 `UC`s). A
 * decode worker closes idle connections after 5 s, as vLLM's uvicorn does, and each client loop
 * sends its next request so that it reaches the worker just as that connection turns 5 s idle.
 *
 * - Without the worker-leg policy (Envoy's 1 h idle timeout, no retry) Envoy writes some of those
 *   requests onto a connection the worker is closing: 503 "upstream connect error or
 *   disconnect/reset before headers. reset reason: connection termination".
 * - With the shipped policy (launch/envoy-policy.ts) Envoy closes its side after 4 s idle, first, and
 *   opens a fresh connection: not one error. The retry policy (`reset-before-request`,
 *   `connect-failure`) does not retry these (the request was written); it covers requests never sent.
 * - A body larger than the route's retry buffer (1 MiB in full duplex) is forwarded once, without
 *   retry (`retry_or_shadow_abandoned`), and answered: the buffer limit never fails a request.
 */
import { TestClient } from '../../launch/client';
import { WORKER_IDLE_TIMEOUT_SECONDS, WORKER_KEEPALIVE_SECONDS } from '../../launch/envoy-policy';
import { withClusterEndpoints } from './support/custom-envoy';
import { startCustomStack, type CustomStack } from './support/custom-stack';
import { startKeepaliveWorker, type KeepaliveWorker } from './support/keepalive-worker';

const KEEPALIVE_MS = WORKER_KEEPALIVE_SECONDS.vllm * 1000;
const LOOPS = 60;
const ROUNDS = 5;
/** The race is timing-bound, and a quiet machine hits the edge less often: race again, at most this often, until the arm without the policy shows it. */
const MAX_PASSES = 4;
const LARGE_BODY_BYTES = 60 * 1024 * 1024;

interface Arm {
  stack: CustomStack;
  worker: KeepaliveWorker;
  client: TestClient;
}

async function startArm(policy: boolean): Promise<Arm> {
  const worker = await startKeepaliveWorker(KEEPALIVE_MS);
  const stack = await startCustomStack({
    steps: () => [{ type: 'decode' }],
    logLevel: 1,
    envoyPolicy: { workerConnectionPolicy: policy },
    editEnvoy: (yaml) => withClusterEndpoints(yaml, 'decode_workers', [worker.address]),
  });
  return { stack, worker, client: new TestClient(stack.publicUrl) };
}

async function stopArm(arm: Arm | undefined): Promise<void> {
  await arm?.client.close();
  await arm?.stack.close();
  await arm?.worker.close();
}

/**
 * LOOPS loops of ROUNDS requests. Each waits so that its next request reaches the worker at the
 * keep-alive edge of the connection it last used: the edge less its own last latency (about the
 * time the request takes through Envoy and the coordinator), give or take 1.5 ms.
 */
async function raceTheEdge(client: TestClient): Promise<{ sent: number; failed: string[] }> {
  const failed: string[] = [];
  let sent = 0;
  const body = { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }] };
  await Promise.all(
    Array.from({ length: LOOPS }, async (_, loop) => {
      for (let round = 0; round < ROUNDS; round++) {
        const start = performance.now();
        sent++;
        const res = await client.post('/v1/chat/completions', body).catch((err: Error) => ({ status: 0, text: err.message }));
        if (res.status !== 200) failed.push(`${res.status} ${res.text.slice(0, 160)}`);
        const latency = performance.now() - start;
        const jitter = (((loop * 7 + round * 13) % 31) - 15) / 10;
        if (round < ROUNDS - 1) await new Promise((r) => setTimeout(r, Math.max(0, KEEPALIVE_MS - latency + jitter)));
      }
    }),
  );
  return { sent, failed };
}

describe(`the forward leg at a worker's ${KEEPALIVE_MS / 1000} s keep-alive edge`, () => {
  let without: Arm | undefined;
  let withPolicy: Arm | undefined;
  beforeAll(async () => {
    [without, withPolicy] = await Promise.all([startArm(false), startArm(true)]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([stopArm(without), stopArm(withPolicy)]);
  });

  it(
    `${LOOPS * ROUNDS} requests or more each: errors without the policy, none with the ${WORKER_IDLE_TIMEOUT_SECONDS} s idle timeout`,
    async () => {
      const off = { sent: 0, failed: [] as string[] };
      const on = { sent: 0, failed: [] as string[] };
      // Both arms race the same number of passes, side by side.
      for (let pass = 0; pass < MAX_PASSES && off.failed.length === 0; pass++) {
        const [a, b] = await Promise.all([raceTheEdge(without!.client), raceTheEdge(withPolicy!.client)]);
        off.sent += a.sent;
        off.failed.push(...a.failed);
        on.sent += b.sent;
        on.failed.push(...b.failed);
      }
      process.stdout.write(
        `keep-alive race: without policy ${off.failed.length}/${off.sent} failed; with policy ${on.failed.length}/${on.sent} failed\n`,
      );
      expect(off.failed.length).toBeGreaterThan(0);
      expect(off.failed[0]).toMatch(/^503 .*reset before headers/);
      expect(on).toEqual({ sent: off.sent, failed: [] });
      // Envoy closed the idle connections itself: the worker never closed one under a request.
      const stats = await withPolicy!.stack.envoy.stats('cluster.decode_workers.upstream_cx_');
      expect(stats['cluster.decode_workers.upstream_cx_idle_timeout']).toBeGreaterThan(0);
      expect(stats['cluster.decode_workers.upstream_cx_destroy_remote_with_active_rq']).toBe(0);
    },
    (MAX_PASSES + 1) * 30_000,
  );

  it('a body above the retry buffer is sent once, without retry, and answered', async () => {
    const arm = withPolicy!;
    const content = 'x'.repeat(LARGE_BODY_BYTES);
    const res = await arm.client.post(
      '/v1/chat/completions',
      { model: 'sim-model', messages: [{ role: 'user', content }] },
      { timeoutMs: 60_000 },
    );
    expect(res.status).toBe(200);
    expect(arm.worker.largestBody).toBeGreaterThanOrEqual(LARGE_BODY_BYTES);
    const stats = await arm.stack.envoy.stats('cluster.decode_workers.retry_or_shadow_abandoned');
    expect(stats['cluster.decode_workers.retry_or_shadow_abandoned']).toBeGreaterThanOrEqual(1);
  }, 90_000);
});
