/**
 * Known issue found by the protocol fuzzer: when Envoy resets a `Process` stream within moments of
 * opening it (the client went away at once), grpc-js 1.14 can hand the stream to our handler and
 * then never report the cancel: no 'cancelled', 'close' or 'error' event. The ProcessStream (and
 * its exchange, with any side call in flight) then stays open until the server shuts down, and the
 * in-flight count never returns to 0.
 *
 * Reproduced here with the real service; the same happens with a bare grpc-js server. Suggested
 * fix (src/extproc): an idle deadline on streams waiting for Envoy (no message for, say, Envoy's
 * stream_idle_timeout) that aborts the exchange and ends the call; or a grpc-js fix. Until then this
 * test is marked failing: it starts to fail (remove `.failing`) once streams are released.
 */
import { startSimulator, type Simulator } from '../../sim/simulator';
import { parseConfig } from '../../src/config/config';
import { silentLogger } from '../../src/observability/logger';
import { startService, type RunningService } from '../../src/service';
import { EnvoyClient } from '../protocol/envoy-client';

/** A real service (prefill -> decode against a simulator) and an Envoy-like client, per describe block. */
function serviceWithClient(): { readonly service: RunningService; readonly client: EnvoyClient } {
  let sim: Simulator | undefined;
  const handles = {} as { service: RunningService; client: EnvoyClient };
  beforeAll(async () => {
    sim = await startSimulator({ name: 'sim-any', role: 'any' });
    handles.service = await startService(
      parseConfig({ server: { listen_addr: '127.0.0.1:0', metrics_addr: '127.0.0.1:0' }, gateway: { address: sim.url }, pipeline: { steps: [{ type: 'prefill' }, { type: 'decode' }] } }, {}),
      { log: silentLogger() },
    );
    handles.client = new EnvoyClient(handles.service.grpcPort);
  });
  afterAll(async () => {
    handles.client?.close();
    await handles.service?.close(200);
    await sim?.close();
  });
  return handles;
}

describe('a Process stream reset right after it opened', () => {
  const svc = serviceWithClient();

  it.failing('is released by the service (in-flight count back to 0)', async () => {
    for (let i = 0; i < 400; i++) {
      const s = svc.client.open();
      s.sendHeaders([[':method', 'POST'], [':path', '/v1/completions']], { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
      s.sendBody(Buffer.from('{"model":"m",'), false);
      for (let k = 0; k < i % 7; k++) await new Promise((r) => setImmediate(r));
      s.cancel();
      await s.rest();
      await s.status;
    }
    for (let i = 0; i < 100 && svc.service.activeStreams() > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(svc.service.activeStreams()).toBe(0);
  });
});

/**
 * Known issue found by the 100k protocol fuzz run: nghttp2 (1.61, in Node 20) closes an HTTP/2
 * session with INTERNAL_ERROR once the client has reset more than about 1000 streams at over 33/s
 * (its rapid-reset protection). Envoy carries every ext_proc stream of a worker thread on one
 * session to the coordinator, and resets a stream whenever a client goes away mid-request: a burst
 * of disconnecting clients then fails every request in flight on that session (Envoy's 500
 * `ext_proc_error_gRPC_error_13` / `remote_refused_stream_reset`). Node 20 does not let grpc-js set
 * the limits (`streamResetBurst`/`streamResetRate` are newer); Envoy can spread streams over more
 * connections (`max_requests_per_connection` on the epd_coordinator cluster) so no session takes that
 * many resets. Marked failing until one of those is in place.
 */
describe('many client resets on one HTTP/2 session', () => {
  const svc = serviceWithClient();

  it.failing('do not break the session other streams are using', async () => {
    for (let i = 0; i < 1500; i++) {
      const s = svc.client.open();
      s.sendHeaders([[':method', 'GET'], [':path', '/x']], { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
      const first = await s.nextOrEnd();
      expect(first?.response).toBe('request_headers');
      s.cancel();
      await s.rest();
      await s.status;
    }
  });
});
