/**
 * A stock Envoy: its ext_proc cluster is a plain HTTP/2 cluster with no `max_requests_per_connection`,
 * as in any existing Envoy a user attaches the coordinator to. Envoy resets every ext_proc stream when
 * its filter is done with it, so one connection takes one RST_STREAM per request. With Node's HTTP/2
 * defaults (a burst of 1000 resets, refilled at 33/s) the coordinator closed that session after 1,100
 * to 2,000 requests, failing every request in flight on it (a bare 500; Envoy's
 * `ext_proc.streams_failed` and the cluster's `upstream_cx_protocol_error`). The coordinator's own
 * budget (server.stream_reset_burst / stream_reset_rate) keeps the session open.
 *
 * 20,000 small requests per body mode through ONE Envoy-to-coordinator connection (Envoy runs one
 * worker thread): every one a 200, both counters at 0, and `upstream_cx_total` of the coordinator
 * cluster exactly 1. The pipeline is decode only, so the requests are cheap and the run is about the
 * HTTP/2 session, not the workers.
 *
 * Stock also means without the graceful ext_proc close the shipped files turn on (the runtime flag is
 * written out as false, Envoy's default) and without their health check, whose own connection would
 * blur the one-connection count: an Envoy without either stays proven.
 */
import type { EnvoyBodyMode } from '../../launch/envoy-bootstrap';
import { GRACEFUL_CLOSE } from '../../launch/envoy-policy';
import { countStatuses } from './support/load';
import { TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';

const REQUESTS = 20_000;
const CONCURRENCY = 64;
const CLUSTER = 'epd_coordinator';

describe.each<EnvoyBodyMode>(['full_duplex', 'buffered'])('a stock Envoy (%s, no stream cap on the coordinator cluster)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startStack({
      bodyMode,
      extProcStreamCap: 0,
      envoyPolicy: { extProcGracefulClose: false, extProcHealthCheck: false },
      steps: () => [{ type: 'decode' }],
      logLevel: 1,
    });
    client = new TestClient(stack.publicUrl);
  }, 60_000);
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });

  it(`carries ${REQUESTS} requests on one coordinator connection, every one a 200`, async () => {
    const bootstrap = (await import('node:fs')).readFileSync(stack.envoy.configPath, 'utf8');
    expect(bootstrap).not.toMatch(/^\s*max_requests_per_connection:/m);
    expect(bootstrap).toContain(`${GRACEFUL_CLOSE.runtimeKey}: false`);
    expect(bootstrap).not.toMatch(/^\s*health_checks:/m);

    expect(await countStatuses(client, REQUESTS, CONCURRENCY)).toEqual({ 200: REQUESTS });
    const stats = await stack.envoy.stats(`cluster.${CLUSTER}.upstream_`);
    const extProc = await stack.envoy.stats('http.public.ext_proc.');
    expect({
      upstream_cx_total: stats[`cluster.${CLUSTER}.upstream_cx_total`],
      upstream_cx_protocol_error: stats[`cluster.${CLUSTER}.upstream_cx_protocol_error`],
      upstream_cx_destroy_remote: stats[`cluster.${CLUSTER}.upstream_cx_destroy_remote`],
      streams_failed: extProc['http.public.ext_proc.streams_failed'],
    }).toEqual({ upstream_cx_total: 1, upstream_cx_protocol_error: 0, upstream_cx_destroy_remote: 0, streams_failed: 0 });
    expect(stats[`cluster.${CLUSTER}.upstream_rq_total`]).toBeGreaterThanOrEqual(REQUESTS);
    // Envoy did reset its streams (one per request): the budget was used, not avoided.
    const resets = await stack.envoy.stats(`cluster.${CLUSTER}.http2.tx_reset`);
    expect(resets[`cluster.${CLUSTER}.http2.tx_reset`]).toBeGreaterThanOrEqual(REQUESTS);
  }, 240_000);
});
