/**
 * The gRPC side of the ext_proc service: message-size limits, the `Process` handler (one
 * ProcessStream per call), the transport that carries it and the server lifecycle.
 *
 * `Process` is served by the lean transport (lean-transport.ts: node:http2 directly) on the
 * listener grpc-js owns; grpc-js keeps TLS, the sessions and every other service, and serves
 * `Process` itself when asked (`transport: 'grpc-js'`) or when its hook is missing.
 *
 * Other services (grpc.health.v1, ...) share the server: either pass `configure`, which is called
 * before the server binds, or build your own server with `extProcServerOptions()` and call
 * `addExtProcService()` on it.
 */
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { RequestHandler } from '../pipeline/decision';
import type { FallbackBodyMode } from './body-mode';
import { createWideWindowServer } from './flow-control';
import { DEFAULT_MAX_REQUEST_HEADERS } from './header-budget';
import type { HealthLookup } from './lean-health';
import { LeanTransport } from './lean-transport';
import { ProcessStream, type ProcessCall } from './process-stream';
import { processCodec, serverServiceDefinition } from './proto';
import type { ProcessingRequestIn, ProcessingResponseOut } from './wire';
import { applySessionLimits, DEFAULT_SESSION_LIMITS, type SessionLimits } from './session-limits';

/** Room for headers, metadata and protobuf framing around the largest body. */
export const MESSAGE_HEADROOM_BYTES = 1024 * 1024;
/** grpc-js keeps message limits in int32. */
const MAX_GRPC_MESSAGE_BYTES = 2 ** 31 - 1;
/** Envoy's `stream_idle_timeout` in envoy/envoy.template.yaml. */
export const DEFAULT_STREAM_IDLE_TIMEOUT_MS = 600_000;
/** Node fires a longer setTimeout at once (with a warning). */
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface MessageLimits {
  /**
   * `grpc.max_receive_message_length`: a BUFFERED body arrives as one message, and Envoy's buffer is
   * set above the body limit (envoy/: 80 MiB for 64 MiB) so that an oversize body still reaches us and
   * gets our JSON 413 rather than a gRPC RESOURCE_EXHAUSTED (a bare 500). Twice the limit covers that
   * while still bounding what a stray gRPC client can make us hold.
   */
  readonly receiveBytes: number;
  /**
   * `grpc.max_send_message_length`: a BUFFERED forward body goes out as one message and may be
   * larger than the client's (token ids, transfer parameters), so twice the body limit.
   */
  readonly sendBytes: number;
  /** The largest body we put into one outgoing message; above it the answer is a 500. */
  readonly responseBodyBytes: number;
}

export function messageLimits(maxBodyBytes: number): MessageLimits {
  if (!Number.isSafeInteger(maxBodyBytes) || maxBodyBytes <= 0) {
    throw new RangeError(`maxBodyBytes: expected a positive integer, got ${String(maxBodyBytes)}`);
  }
  const receiveBytes = Math.min(2 * maxBodyBytes + MESSAGE_HEADROOM_BYTES, MAX_GRPC_MESSAGE_BYTES);
  const sendBytes = Math.min(2 * maxBodyBytes + MESSAGE_HEADROOM_BYTES, MAX_GRPC_MESSAGE_BYTES);
  return { receiveBytes, sendBytes, responseBodyBytes: sendBytes - MESSAGE_HEADROOM_BYTES };
}

/** Options for `new grpc.Server(...)` when the caller builds the server itself. */
export function extProcServerOptions(maxBodyBytes: number): grpc.ServerOptions {
  const limits = messageLimits(maxBodyBytes);
  return {
    'grpc.max_receive_message_length': limits.receiveBytes,
    'grpc.max_send_message_length': limits.sendBytes,
  };
}

export interface ExtProcServiceOptions {
  readonly handler: RequestHandler;
  /** The body limit the server's gRPC message sizes are derived from (64 MiB upstream default). */
  readonly maxBodyBytes: number;
  /** Dynamic-metadata namespace, e.g. `epd.coordinator`. */
  readonly metadataNamespace: string;
  /** Body mode assumed when Envoy (< 1.34) does not announce `protocol_config`. */
  readonly fallbackBodyMode: FallbackBodyMode;
  /**
   * Stream `respond` bodies as a streamed_immediate_response in FULL_DUPLEX_STREAMED mode (needs
   * Envoy >= 1.37). Default true; false collects them into one immediate_response (Envoy 1.34-1.36).
   */
  readonly streamedResponses?: boolean;
  readonly log: Logger;
  /** Told about every `Process` stream (metrics); default none. */
  readonly streamObserver?: StreamObserver;
  /**
   * A stream on which Envoy owes us the request (headers, body) but sends nothing for this long is
   * ended with DEADLINE_EXCEEDED and released, its exchange aborted. 0 = never. Default
   * {@link DEFAULT_STREAM_IDLE_TIMEOUT_MS}.
   */
  readonly streamIdleTimeoutMs?: number;
  /**
   * Envoy's header-count limit for the requests it sends us (the listener's max_headers_count): an
   * inference request with no room for our headers under it gets a 431 at once, instead of Envoy's
   * bare 500 after the pipeline. 0 = no check. Default {@link DEFAULT_MAX_REQUEST_HEADERS}.
   */
  readonly maxRequestHeaders?: number;
}

/** Watches `Process` streams without the protocol layer knowing what is recorded. */
export interface StreamObserver {
  /** A stream opened; the returned function is called once when it closes. */
  opened(): () => void;
  /**
   * Envoy sent one message (`request_headers`, `response_body`, ...): shows which phases Envoy
   * actually hands us (none of the response's, unless the filter is configured to).
   */
  received?(message: string): void;
}

export interface ExtProcService {
  /** `Process` streams currently open. */
  activeStreams(): number;
  /** Starts a ProcessStream on a call of either transport (grpc-js's `Process` handler is this). */
  readonly serve: (call: ProcessCall) => void;
  /**
   * From now on every new `Process` call is answered UNAVAILABLE at once (Envoy then fails that
   * request, or retries it on another host); open streams carry on. Other services keep serving.
   */
  refuseNewStreams(): void;
}

/** Registers `envoy.service.ext_proc.v3.ExternalProcessor` on a server the caller owns. */
export function addExtProcService(server: grpc.Server, opts: ExtProcServiceOptions): ExtProcService {
  const limits = messageLimits(opts.maxBodyBytes);
  const streamIdleTimeoutMs = opts.streamIdleTimeoutMs ?? DEFAULT_STREAM_IDLE_TIMEOUT_MS;
  if (!Number.isFinite(streamIdleTimeoutMs) || streamIdleTimeoutMs < 0 || streamIdleTimeoutMs > MAX_TIMER_MS) {
    throw new RangeError(`streamIdleTimeoutMs: expected 0..${MAX_TIMER_MS}, got ${String(streamIdleTimeoutMs)}`);
  }
  const maxRequestHeaders = opts.maxRequestHeaders ?? DEFAULT_MAX_REQUEST_HEADERS;
  if (!Number.isSafeInteger(maxRequestHeaders) || maxRequestHeaders < 0) {
    throw new RangeError(`maxRequestHeaders: expected a non-negative integer, got ${String(maxRequestHeaders)}`);
  }
  const streamOptions = {
    handler: opts.handler,
    metadataNamespace: opts.metadataNamespace,
    fallbackBodyMode: opts.fallbackBodyMode,
    streamedResponses: opts.streamedResponses ?? true,
    log: opts.log,
    maxBodyBytes: opts.maxBodyBytes,
    maxResponseBodyBytes: limits.responseBodyBytes,
    streamIdleTimeoutMs,
    maxRequestHeaders,
    received: opts.streamObserver?.received?.bind(opts.streamObserver),
  };
  let active = 0;
  let refusing = false;
  const observer = opts.streamObserver;
  const process = (call: ProcessCall): void => {
    if (refusing) {
      call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'epd-coordinator is draining' });
      return;
    }
    active++;
    const observed = observer?.opened();
    let finished = false;
    const onFinish = (): void => {
      if (finished) return;
      finished = true;
      active--;
      observed?.();
    };
    try {
      new ProcessStream(call, streamOptions, onFinish);
    } catch (err) {
      // Only a bug in the constructor gets here; grpc-js ends the call with UNKNOWN.
      onFinish();
      opts.log.error({ err }, 'ext_proc: cannot start a Process stream');
      throw err;
    }
  };
  // Typed here so that the compiler checks grpc-js's call against ProcessCall.
  const grpcJsProcess = (call: grpc.ServerDuplexStream<ProcessingRequestIn, ProcessingResponseOut>): void => process(call);
  server.addService(serverServiceDefinition(), { Process: grpcJsProcess });
  return {
    activeStreams: () => active,
    serve: process,
    refuseNewStreams: () => {
      refusing = true;
    },
  };
}

/**
 * What carries `Process`: `lean` (default) the lean transport, `grpc-js` grpc-js itself (the A/B
 * baseline of the budget bench, and the fallback the lean one must match).
 */
export type ProcessTransport = 'lean' | 'grpc-js';

export interface ExtProcServerOptions extends ExtProcServiceOptions {
  /** `host:port` (`127.0.0.1:0` picks a free port) or `unix:///path/to.sock`. */
  readonly address: string;
  /** Default: insecure (plaintext h2c, as Envoy's ext_proc clusters usually are). */
  readonly credentials?: grpc.ServerCredentials;
  /** Called with the server before it binds: register health and other services here. */
  readonly configure?: (server: grpc.Server) => void;
  /** HTTP/2 session limits (Envoy's per-stream resets); default {@link DEFAULT_SESSION_LIMITS}. */
  readonly sessionLimits?: SessionLimits;
  /** Default `lean`. */
  readonly transport?: ProcessTransport;
  /**
   * The health statuses the grpc-js health service registered in `configure` holds: with them
   * the lean transport answers `grpc.health.v1.Health/Check` itself (lean-health.ts).
   */
  readonly healthCheck?: HealthLookup;
}

export interface ExtProcServer {
  /** The bound TCP port (for unix sockets whatever grpc-js reports). */
  readonly port: number;
  /** The underlying server, for services added later. */
  readonly server: grpc.Server;
  /** What carries `Process` on this server: `grpc-js` if the lean transport was not asked for, or could not hook in. */
  readonly transport: ProcessTransport;
  activeStreams(): number;
  /** Stops accepting calls, waits up to `graceMs` for open streams, then cancels the rest. */
  shutdown(graceMs: number): Promise<void>;
  /**
   * Refuses new `Process` streams (UNAVAILABLE) while the listener, and so the health service,
   * keeps answering; waits up to `graceMs` for open streams to finish, then closes everything
   * (cancelling what is left). Resolves with the number of streams cancelled.
   */
  drain(graceMs: number): Promise<number>;
  /** Cancels every open stream now (each exchange is aborted) and closes the listener. */
  forceShutdown(): void;
}

export async function startExtProcServer(opts: ExtProcServerOptions): Promise<ExtProcServer> {
  let lean: LeanTransport | undefined;
  const server = createWideWindowServer(extProcServerOptions(opts.maxBodyBytes), (h2) => lean?.attach(h2));
  if (!applySessionLimits(server, opts.sessionLimits ?? DEFAULT_SESSION_LIMITS)) {
    opts.log.warn("this grpc-js has no commonServerOptions: HTTP/2 sessions keep Node's stream-reset limit (1000, 33/s)");
  } else if (Number(process.versions.node.split('.')[0]) < 24) {
    // Node 20 ignores the options: Envoy's per-stream resets will close sessions (package.json engines).
    opts.log.warn({ node: process.version }, 'Node < 24 ignores server.stream_reset_burst/rate: run on Node 24');
  }
  const service = addExtProcService(server, opts);
  if ((opts.transport ?? 'lean') === 'lean') {
    const limits = messageLimits(opts.maxBodyBytes);
    lean = new LeanTransport(
      service.serve,
      { codec: processCodec(), receiveBytes: limits.receiveBytes, sendBytes: limits.sendBytes },
      opts.healthCheck,
    );
  }
  opts.configure?.(server);
  const credentials = opts.credentials ?? grpc.ServerCredentials.createInsecure();
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(opts.address, credentials, (err, boundPort) => (err ? reject(err) : resolve(boundPort)));
  });
  if (lean && !lean.serving)
    opts.log.warn('this grpc-js cannot be hooked: it serves the Process method itself (the lean transport is off)');
  // grpc-js does not know the lean calls: ending its sessions resets them, and they are cancelled here too.
  const forceShutdown = (): void => {
    server.forceShutdown();
    lean?.cancelAll();
  };
  return {
    port,
    server,
    transport: lean?.serving ? 'lean' : 'grpc-js',
    activeStreams: service.activeStreams,
    shutdown: (graceMs: number) => shutdownGracefully(server, graceMs, forceShutdown),
    drain: async (graceMs: number) => {
      service.refuseNewStreams();
      await waitUntil(() => service.activeStreams() === 0, graceMs);
      const left = service.activeStreams();
      forceShutdown();
      return left;
    },
    forceShutdown,
  };
}

/** Polls `done` until it holds or `timeoutMs` passes. Streams end on their own; 20 ms is plenty. */
async function waitUntil(done: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + Math.max(0, timeoutMs);
  while (!done() && performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, Math.min(20, Math.max(1, deadline - performance.now()))));
  }
}

/** tryShutdown closes the sessions once their streams end, the lean ones included (they share them). */
function shutdownGracefully(server: grpc.Server, graceMs: number, forceShutdown: () => void): Promise<void> {
  return new Promise<void>((resolve) => {
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(
      () => {
        forceShutdown();
        // forceShutdown is synchronous; tryShutdown's callback may never come after it.
        setImmediate(finish);
      },
      Math.max(0, graceMs),
    );
    server.tryShutdown(() => finish());
  });
}
