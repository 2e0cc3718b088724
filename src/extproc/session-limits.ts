/**
 * Per-session limits of the ext_proc listener's HTTP/2 sessions: the ones that, when tripped, end a
 * whole session and so fail every request in flight on it at once.
 *
 * The peer is Envoy, and Envoy resets every ext_proc stream once its filter is done with it (its
 * `http2.tx_reset` equals the request count), besides every stream whose client went away. nghttp2
 * counts incoming RST_STREAM frames in a token bucket (Node's defaults: a burst of 1000, refilled at
 * 33/s, a guard against the "rapid reset" attack) and ends the session with INTERNAL_ERROR when it is
 * empty. Envoy carries all the ext_proc streams of a worker thread on one session, so at a steady
 * 330 req/s a session died after 1,100 to 2,000 requests, each time failing every stream on it (a
 * bare Envoy 500, `ext_proc.streams_failed`). Node 24 (not Node 20) lets a server raise the
 * bucket; grpc-js has no option for it, so it goes into the options grpc-js builds its HTTP/2
 * server from.
 *
 * The defaults let one session take 10,000 resets a second forever, with a burst of 100,000: far
 * above what one coordinator process can serve (each reset follows a stream we accepted), so a
 * reset-every-stream peer can never drain it, while a client that opens and resets streams faster
 * than that still loses its session. The listener is for Envoy only (loopback, the pod network, or
 * mTLS with `server.tls_client_ca_file`): an untrusted client that can reach it can do worse.
 *
 * The other limits that end a session, and why none of them can be reached by Envoy, are in
 * docs/hardening.md ("Per-session limits of the ext_proc listener"), each with a test in
 * test/protocol/session-limits.test.ts.
 */
import type * as http2 from 'node:http2';
import type * as grpc from '@grpc/grpc-js';

export interface SessionLimits {
  /** RST_STREAM frames a peer may send at once before the session ends (nghttp2's bucket size). */
  readonly streamResetBurst: number;
  /** RST_STREAM frames per second that refill the bucket. */
  readonly streamResetRate: number;
}

export const DEFAULT_SESSION_LIMITS: SessionLimits = { streamResetBurst: 100_000, streamResetRate: 10_000 };

/** nghttp2 keeps both in uint32. */
export const MAX_SESSION_LIMIT = 2 ** 32 - 1;

interface WithHttp2Options {
  commonServerOptions?: http2.ServerOptions;
}

/**
 * Adds the limits to the options grpc-js (1.10 - 1.14, private `commonServerOptions`) passes to
 * `http2.createServer` / `createSecureServer` for every port it binds. Call before `bindAsync`.
 * Returns false when this grpc-js has no such field; the server then runs with Node's defaults,
 * and test/protocol/session-limits.test.ts fails to say so.
 */
export function applySessionLimits(server: grpc.Server, limits: SessionLimits = DEFAULT_SESSION_LIMITS): boolean {
  for (const [name, v] of Object.entries(limits)) {
    if (!Number.isInteger(v) || v < 1 || v > MAX_SESSION_LIMIT) {
      throw new RangeError(`${name}: expected an integer 1-${MAX_SESSION_LIMIT}, got ${String(v)}`);
    }
  }
  const target = server as unknown as WithHttp2Options;
  if (typeof target.commonServerOptions !== 'object' || target.commonServerOptions === null) return false;
  // Both must be set for either to take effect (Node's http2 docs).
  target.commonServerOptions = {
    ...target.commonServerOptions,
    streamResetBurst: limits.streamResetBurst,
    streamResetRate: limits.streamResetRate,
  };
  return true;
}
