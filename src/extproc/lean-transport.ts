/**
 * The lean transport: Envoy's `Process` streams are served straight from node:http2 (lean-call.ts),
 * and so are health `Check` calls when the server is given the statuses (lean-health.ts); every
 * other stream (health `Watch`, an unknown method, ...) goes to grpc-js as before.
 *
 * Why only one method: `Process` is the hot path, one bidi stream per HTTP request, and grpc-js
 * costs it about as much again as a bare node:http2 bidi stream does (`npm run bench -- budget`,
 * layer `transport`): an object-mode Duplex per call, a pause/resume per message, interceptors,
 * metadata objects, channelz call counters. What the lean call leaves out is what this peer never
 * uses (compression, interceptors, per-call metadata beyond `x-epd-origin`). grpc-js keeps what it
 * does well and what operators rely on: the listener and its TLS/mTLS (certificate reload
 * included), the HTTP/2 sessions (settings, keepalive, connection age, GOAWAY on shutdown: the lean
 * streams live on the same sessions, so a graceful shutdown waits for them too) and every other
 * service. Replacing grpc-js entirely would mean rewriting those for no gain on the hot path.
 *
 * The hook: grpc-js listens for the http2 server's 'stream' event once per server it creates
 * (private `createHttp2Server`, flow-control.ts). That listener is moved behind ours, which takes
 * the `Process` path. A grpc-js that listens otherwise is left alone: grpc-js then serves
 * `Process` too (it stays registered), and test/protocol/lean-transport.test.ts fails to say so.
 */
import type * as http2 from 'node:http2';
import { GrpcStatus, LeanCall, type LeanCallOptions } from './lean-call';
import { isLeanHealthCheck, serveHealthCheck, type HealthLookup } from './lean-health';
import type { ProcessCall } from './outbound';
import { EXT_PROC_SERVICE_NAME } from './proto';

export const PROCESS_PATH = `/${EXT_PROC_SERVICE_NAME}/Process`;

type StreamListener = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, flags: number, rawHeaders: string[]) => void;

const ignore = (): void => undefined;

export class LeanTransport {
  private readonly calls = new Set<LeanCall>();
  private readonly forget = (call: LeanCall): void => {
    this.calls.delete(call);
  };
  private servers = 0;

  constructor(
    /** Starts a ProcessStream on the call (the same function grpc-js's `Process` handler is). */
    private readonly serve: (call: ProcessCall) => void,
    private readonly callOptions: LeanCallOptions,
    /** Answers grpc.health.v1 `Check` here (lean-health.ts); without it grpc-js does. */
    private readonly health?: HealthLookup,
  ) {}

  /** True once it serves `Process` on at least one listener. */
  get serving(): boolean {
    return this.servers > 0;
  }

  /** Takes the `Process` streams of one of grpc-js's http2 servers; false if it cannot. */
  attach(h2: http2.Http2Server | http2.Http2SecureServer): boolean {
    const theirs = h2.listeners('stream') as StreamListener[];
    if (theirs.length !== 1) return false;
    const grpcJs = theirs[0]!;
    h2.removeListener('stream', grpcJs);
    h2.on('stream', (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
      if (headers[':path'] === PROCESS_PATH) this.accept(stream, headers);
      else if (this.health && isLeanHealthCheck(headers)) {
        stream.on('error', ignore);
        serveHealthCheck(stream, this.health);
      } else grpcJs.call(h2, stream, headers, flags, rawHeaders);
    });
    this.servers++;
    return true;
  }

  /** Lean calls not over yet. */
  openCalls(): number {
    return this.calls.size;
  }

  /** Resets every open lean call (each exchange is aborted): grpc-js does not know them. */
  cancelAll(): void {
    for (const call of [...this.calls]) call.cancel();
  }

  private accept(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    // Errors end in 'close', which the call handles; an unhandled 'error' would crash the process.
    stream.on('error', ignore);
    const type = headers['content-type'];
    if (typeof type !== 'string' || !type.startsWith('application/grpc')) {
      // PROTOCOL-HTTP2.md: answered 415 (as grpc-js does), no call is made.
      try {
        stream.respond({ ':status': 415 }, { endStream: true });
      } catch {
        // reset meanwhile
      }
      return;
    }
    const call = new LeanCall(stream, headers, this.callOptions, this.forget);
    this.calls.add(call);
    try {
      this.serve(call);
    } catch {
      // As grpc-js answers a handler that throws (server.ts logged it).
      call.emit('error', { code: GrpcStatus.UNKNOWN, details: 'Unknown error' });
    }
  }
}
