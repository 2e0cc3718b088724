/**
 * A storm of clients that go away mid-request, through the real Envoy, must not break the requests
 * of everyone else.
 *
 * Each such client makes Envoy reset its ext_proc stream. nghttp2 ends a whole HTTP/2 session with
 * INTERNAL_ERROR once its peer has reset about 1000 streams faster than 33/s (its rapid-reset guard,
 * Node's default budget). Envoy carries every ext_proc stream of a worker thread on one session, so
 * before the fix a burst of disconnects failed every request in flight on it (Envoy's 500
 * `ext_proc_error_gRPC_error_13`). Found by the 100k protocol fuzz run. The coordinator now raises
 * that budget (server.stream_reset_burst / stream_reset_rate); this suite runs Envoy's coordinator
 * cluster with no `max_requests_per_connection` (the bootstraps' cap of 500 is defence in depth
 * only), so the coordinator's own budget is what keeps the session.
 */
import { connect, type Socket } from 'node:net';
import { TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';

const RESETS = 1500;
const BATCH = 50;

describe('1500 clients leaving mid-request through Envoy', () => {
  let stack: Stack;
  let client: TestClient;
  let port: number;
  beforeAll(async () => {
    stack = await startStack({ steps: () => [{ type: 'prefill' }, { type: 'decode' }], extProcStreamCap: 0 });
    client = new TestClient(stack.publicUrl);
    port = Number(new URL(stack.publicUrl).port);
    expect((await client.post('/v1/completions', { model: 'sim-model', prompt: 'warm', max_tokens: 2 })).status).toBe(200);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });

  /** A client that sends headers and part of its body, then waits to be cut. */
  function halfRequest(): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => {
        socket.write(
          'POST /v1/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"model":"sim-model",',
        );
        resolve(socket);
      });
      socket.on('error', reject);
    });
  }

  async function until(cond: () => boolean, ms: number): Promise<boolean> {
    const end = Date.now() + ms;
    while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 2));
    return cond();
  }

  it('leave the requests of every other client untouched', async () => {
    const before = await stack.envoy.stats('cluster.epd_coordinator.upstream_rq_total');
    let storming = true;
    const statuses: number[] = [];
    // Other clients keep sending ordinary requests on the same Envoy worker all through the storm.
    const others = Array.from({ length: 4 }, async () => {
      while (storming) {
        const res = await client.post('/v1/completions', { model: 'sim-model', prompt: 'still here?', max_tokens: 2 });
        statuses.push(res.status);
      }
    });

    let reset = 0;
    try {
      while (reset < RESETS) {
        const sockets = await Promise.all(Array.from({ length: BATCH }, halfRequest));
        // Cut them only once the coordinator holds their streams, so each cut is a stream reset.
        await until(() => stack.service.activeStreams() >= BATCH, 2000);
        for (const s of sockets) s.destroy();
        reset += BATCH;
        await until(() => stack.service.activeStreams() <= 4, 2000);
      }
    } finally {
      storming = false;
      await Promise.all(others);
    }

    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    // One coordinator connection carried every stream, and it was never closed under them.
    const stats = await stack.envoy.stats('cluster.epd_coordinator.upstream_');
    expect(
      stats['cluster.epd_coordinator.upstream_rq_total']! - before['cluster.epd_coordinator.upstream_rq_total']!,
    ).toBeGreaterThanOrEqual(RESETS);
    expect(stats['cluster.epd_coordinator.upstream_cx_total']).toBe(1);
    expect(stats['cluster.epd_coordinator.upstream_cx_protocol_error']).toBe(0);
    expect(stats['cluster.epd_coordinator.upstream_cx_destroy_remote_with_active_rq']).toBe(0);
    // And the stack still answers.
    expect((await client.post('/v1/completions', { model: 'sim-model', prompt: 'after', max_tokens: 2 })).status).toBe(200);
    await until(() => stack.service.activeStreams() === 0, 2000);
    expect(stack.service.activeStreams()).toBe(0);
  }, 120_000);
});
