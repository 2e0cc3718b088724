/**
 * Graceful ext_proc close, as every shipped Envoy configuration sets it
 * (`envoy.reloadable_features.ext_proc_graceful_grpc_close`, launch/envoy-policy.ts): Envoy
 * half-closes each ext_proc stream when its filter is done and the coordinator ends the call, so
 * the coordinator's cluster sees no HTTP/2 stream reset in either direction. Without the flag
 * Envoy resets every stream (the control arm, and faults/stock-envoy.test.ts at 20,000 requests).
 *
 * Streaming and non-streaming chats through the full pipeline (render, prefill, decode), every one a
 * 200 with its whole answer.
 */
import { readFileSync } from 'node:fs';
import type { EnvoyBodyMode } from '../../launch/envoy-bootstrap';
import { GRACEFUL_CLOSE } from '../../launch/envoy-policy';
import { TestClient } from '../../launch/client';
import { mixedChats } from './support/load';
import { startStack, type Stack } from '../support/stack';

const REQUESTS = 400;
const CONTROL_REQUESTS = 50;
const CONCURRENCY = 8;
const RESETS = ['cluster.epd_coordinator.http2.tx_reset', 'cluster.epd_coordinator.http2.rx_reset'];

async function resets(stack: Stack): Promise<Record<string, number>> {
  const stats = await stack.envoy.stats('cluster.epd_coordinator.http2.');
  return Object.fromEntries(RESETS.map((k) => [k, stats[k] ?? 0]));
}

describe.each<EnvoyBodyMode>(['full_duplex', 'buffered'])('graceful ext_proc close (%s)', (bodyMode) => {
  describe('on, as shipped', () => {
    let stack: Stack;
    let client: TestClient;
    beforeAll(async () => {
      stack = await startStack({ bodyMode, logLevel: 1 });
      client = new TestClient(stack.publicUrl);
    }, 60_000);
    afterAll(async () => {
      await client?.close();
      await stack?.close();
    });

    it(`${REQUESTS} requests: every one whole, and not one stream reset on the coordinator's cluster`, async () => {
      expect(readFileSync(stack.envoy.configPath, 'utf8')).toContain(`${GRACEFUL_CLOSE.runtimeKey}: true`);
      const tally = await mixedChats(client, { concurrency: CONCURRENCY, total: REQUESTS });
      expect(tally).toEqual({ sent: REQUESTS, failed: 0, cut: 0, failures: [] });
      const rq = await stack.envoy.stats('cluster.epd_coordinator.upstream_rq_total');
      expect(rq['cluster.epd_coordinator.upstream_rq_total']).toBeGreaterThanOrEqual(REQUESTS);
      expect(await resets(stack)).toEqual(Object.fromEntries(RESETS.map((k) => [k, 0])));
    }, 120_000);
  });

  describe('off (control: the counter sees resets)', () => {
    let stack: Stack;
    let client: TestClient;
    beforeAll(async () => {
      stack = await startStack({ bodyMode, logLevel: 1, envoyPolicy: { extProcGracefulClose: false } });
      client = new TestClient(stack.publicUrl);
    }, 60_000);
    afterAll(async () => {
      await client?.close();
      await stack?.close();
    });

    it(`${CONTROL_REQUESTS} requests: all whole, and Envoy resets every ext_proc stream`, async () => {
      expect(readFileSync(stack.envoy.configPath, 'utf8')).toContain(`${GRACEFUL_CLOSE.runtimeKey}: false`);
      const tally = await mixedChats(client, { concurrency: CONCURRENCY, total: CONTROL_REQUESTS });
      expect(tally.failed + tally.cut).toBe(0);
      const r = await resets(stack);
      expect(r['cluster.epd_coordinator.http2.tx_reset']).toBeGreaterThanOrEqual(CONTROL_REQUESTS);
    }, 60_000);
  });
});
