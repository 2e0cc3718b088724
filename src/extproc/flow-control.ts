/**
 * HTTP/2 receive windows of the ext_proc server.
 *
 * grpc-js serves with Node's defaults: 64 KiB per stream and per connection. Envoy may then send
 * only 64 KiB of a request body before it must wait for our WINDOW_UPDATE, so a 20 MB body crosses
 * loopback in some 300 round trips. With 4 MiB per stream and 16 MiB per connection, the
 * coordinator's own share of the latency it adds to a 20 MB generate request fell from about 195 ms
 * to about 135 ms (`npm run bench -- large-body`, own_added_p50_ms), for a peak RSS about 0.6 x the
 * body higher; 16 / 64 MiB measured no faster and lets one Envoy connection make us hold four times
 * as much unread. The same sizes as the EnvoyExtensionPolicy grants the coordinator in the other
 * direction (config/k8s).
 *
 * grpc-js has no option for either window, so each session is tuned as it opens, through a hook on
 * grpc-js's (private) `createHttp2Server`. Should a grpc-js release drop that method, the server
 * still works, with the default windows, and test/protocol/flow-control.test.ts fails to say so.
 */
import type * as http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';

export const STREAM_WINDOW_BYTES = 4 * 1024 * 1024;
export const CONNECTION_WINDOW_BYTES = 16 * 1024 * 1024;

interface Http2ServerFactory {
  createHttp2Server(this: grpc.Server, credentials: grpc.ServerCredentials): http2.Http2Server;
}

const baseCreateHttp2Server = (grpc.Server.prototype as unknown as Partial<Http2ServerFactory>).createHttp2Server;

/** Opens a session's windows: SETTINGS_INITIAL_WINDOW_SIZE for its streams, and the connection's. */
export function widenReceiveWindows(session: http2.ServerHttp2Session): void {
  try {
    session.setLocalWindowSize(CONNECTION_WINDOW_BYTES);
    session.settings({ initialWindowSize: STREAM_WINDOW_BYTES });
  } catch {
    // A session torn down before its handshake finished: nothing left to tune.
  }
}

/**
 * A grpc-js server whose HTTP/2 sessions get the receive windows above. `onHttp2Server` sees each
 * node:http2 server grpc-js makes (one per bound address), once grpc-js listens on it: the lean
 * transport takes its `Process` streams there (lean-transport.ts).
 */
export function createWideWindowServer(
  options: grpc.ServerOptions,
  onHttp2Server?: (h2: http2.Http2Server | http2.Http2SecureServer) => void,
): grpc.Server {
  const server = new grpc.Server(options);
  const base = baseCreateHttp2Server;
  if (typeof base === 'function') {
    (server as unknown as Http2ServerFactory).createHttp2Server = function (credentials) {
      const h2 = base.call(this, credentials);
      h2.on('session', widenReceiveWindows);
      onHttp2Server?.(h2);
      return h2;
    };
  }
  return server;
}
