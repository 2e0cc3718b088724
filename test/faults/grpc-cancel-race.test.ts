/**
 * Found by the protocol fuzzer: when Envoy resets a `Process` stream within moments of opening it
 * (the client went away at once), grpc-js 1.14 can hand the stream to our handler and then never
 * report the cancel: no 'cancelled', 'close' or 'error' event (the same happens with a bare grpc-js
 * server). The grpc-js quirk remains; what releases such a stream is our idle deadline
 * (`server.stream_idle_timeout`, src/extproc/process-stream.ts): a stream on which Envoy still owes
 * the request but sends nothing for that long is ended, its exchange aborted, and the in-flight
 * count returns to 0. Here the deadline is 300 ms, so the streams grpc-js forgot are released
 * within the test's wait.
 */
import { useServiceWithSimulator } from '../protocol/harness';

describe('a Process stream reset right after it opened', () => {
  const svc = useServiceWithSimulator({ stream_idle_timeout: '300ms' });

  it('is released by the service (in-flight count back to 0)', async () => {
    for (let i = 0; i < 400; i++) {
      const s = svc.client.open();
      s.sendHeaders(
        [
          [':method', 'POST'],
          [':path', '/v1/completions'],
        ],
        { requestBodyMode: 'FULL_DUPLEX_STREAMED' },
      );
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
