/**
 * The Envoy settings that keep requests alive across restarts and idle connections, in one place:
 * envoy/ (launch/envoy-bootstrap.ts), the no-Kubernetes topology (launch/topology-envoy.ts),
 * config/k8s and the chart are rendered from, or checked against, these values.
 *
 * - graceful ext_proc close: Envoy half-closes the ext_proc stream and waits for the service to end
 *   the call, instead of resetting it (one RST_STREAM, one Node error and one nghttp2 reset token per
 *   request without it);
 * - the worker legs: an idle timeout below every worker's keep-alive, so that Envoy never sends a
 *   request on a connection the worker is closing, and a retry policy that retries only what never
 *   reached a worker;
 * - the service's cluster: a grpc.health.v1 check on the readiness service, so a draining replica
 *   leaves before it refuses streams, and outlier detection for one that stopped answering.
 */
import { EXT_PROC_SERVICE_NAME } from '../src/observability/health';

export const GRACEFUL_CLOSE = {
  runtimeKey: 'envoy.reloadable_features.ext_proc_graceful_grpc_close',
  /** The first Envoy release that has the flag (off by default there). */
  sinceEnvoy: '1.34',
  /** How long Envoy waits for the service to end the call after its half-close; Envoy's default, not set by us. */
  remoteCloseTimeoutKey: 'envoy.filters.http.ext_proc.remote_close_timeout_milliseconds',
  remoteCloseTimeoutMs: 1000,
} as const;

/** The keep-alive of the workers we know, seconds: the idle timeout below stays under the smallest. */
export const WORKER_KEEPALIVE_SECONDS = {
  /** vLLM's uvicorn (`--timeout-keep-alive`, VLLM_HTTP_TIMEOUT_KEEP_ALIVE). */
  vllm: 5,
  /** Node's http.Server `keepAliveTimeout` (SGLang's and most Python servers' defaults are 5 s too). */
  node: 5,
  // llm-d-inference-sim (fasthttp, no IdleTimeout/ReadTimeout) keeps idle connections open for good.
} as const;

/** `common_http_protocol_options.idle_timeout` of every worker cluster (BackendTrafficPolicy `connectionIdleTimeout`). */
export const WORKER_IDLE_TIMEOUT_SECONDS = 4;

/**
 * The worker routes' retry policy: only a request no worker received (the connection failed, or it
 * was reset before Envoy wrote the request). A request a worker may have started is never retried:
 * it may already be generating. Envoy buffers the body to retry it, up to the route's
 * `request_body_buffer_limit` (else the listener's per-connection buffer limit); a larger body is
 * sent once, without retry (`retry_or_shadow_abandoned`), never refused for it.
 */
export const WORKER_RETRY = {
  retryOn: ['reset-before-request', 'connect-failure'] as readonly string[],
  numRetries: 2,
} as const;

/**
 * The active health check of the service's cluster (grpc.health.v1, the readiness service name).
 *
 * Every 2 s, one failure to eject: the same 3 s detection as 1 s x 2, for half the checks. A check
 * is cheap for Envoy but not for an idle Node process, where each one runs cold through node:http2
 * (about 0.6 ms of CPU: a replica's idle CPU was 0.68-0.93 ms/s at 1 s and 0.31 at 5 s, and at one
 * request a second the check is billed to the request). What is given up is tolerance of a
 * single unanswered check: a replica that cannot answer within the 1 s timeout is out until its
 * next answer, 2 s later (with every replica out Envoy's panic mode still sends to all).
 */
export const SERVICE_HEALTH_CHECK = {
  service: EXT_PROC_SERVICE_NAME,
  intervalSeconds: 2,
  timeoutSeconds: 1,
  unhealthyThreshold: 1,
  healthyThreshold: 1,
} as const;

/**
 * The longest time Envoy may keep picking a replica after it turned NOT_SERVING: the drain that
 * keeps accepting streams (preStop sleep under Kubernetes, `server.drain_delay` elsewhere) must
 * last at least this long.
 */
export const HEALTH_DETECTION_SECONDS =
  SERVICE_HEALTH_CHECK.intervalSeconds * SERVICE_HEALTH_CHECK.unhealthyThreshold + SERVICE_HEALTH_CHECK.timeoutSeconds;

/**
 * `server.drain_delay` for the envoy/ files, and the chart's default preStop sleep: the detection
 * time and 2 s for Envoy's own scheduling of the checks on a busy host.
 */
export const DRAIN_DELAY_SECONDS = HEALTH_DETECTION_SECONDS + 2;

/** Outlier detection on the service's cluster: a replica whose streams fail to open is ejected for a while. */
export const SERVICE_OUTLIER_DETECTION = {
  consecutiveLocalOriginFailure: 3,
  intervalSeconds: 5,
  baseEjectionSeconds: 10,
  maxEjectionPercent: 50,
} as const;

// ---- the same, as Envoy bootstrap objects (snake_case, as the YAML reads) ----

/** The bootstrap's runtime layer; `on: false` states Envoy's default explicitly (the stock-Envoy suites). */
export function gracefulCloseRuntime(on: boolean): Record<string, unknown> {
  return { layers: [{ name: 'epd-coordinator', static_layer: { [GRACEFUL_CLOSE.runtimeKey]: on } }] };
}

export function workerRetryPolicy(): Record<string, unknown> {
  return { retry_on: WORKER_RETRY.retryOn.join(','), num_retries: WORKER_RETRY.numRetries };
}

export function workerCommonHttpOptions(): Record<string, unknown> {
  return { idle_timeout: `${WORKER_IDLE_TIMEOUT_SECONDS}s` };
}

export function serviceHealthChecks(): unknown[] {
  const h = SERVICE_HEALTH_CHECK;
  return [
    {
      timeout: `${h.timeoutSeconds}s`,
      interval: `${h.intervalSeconds}s`,
      // Envoy's default (60 s) would space the checks after start-up, before any traffic: a drain
      // right then would go unseen for a minute.
      no_traffic_interval: `${h.intervalSeconds}s`,
      unhealthy_threshold: h.unhealthyThreshold,
      healthy_threshold: h.healthyThreshold,
      grpc_health_check: { service_name: h.service },
    },
  ];
}

export function serviceOutlierDetection(): Record<string, unknown> {
  const o = SERVICE_OUTLIER_DETECTION;
  return {
    split_external_local_origin_errors: true,
    consecutive_local_origin_failure: o.consecutiveLocalOriginFailure,
    interval: `${o.intervalSeconds}s`,
    base_ejection_time: `${o.baseEjectionSeconds}s`,
    max_ejection_percent: o.maxEjectionPercent,
  };
}

/**
 * `server.workers` > 1: the streams one Envoy worker thread may put on one connection to the
 * service (the cluster's `http2_protocol_options.max_concurrent_streams`). Envoy's HTTP/2 pool keeps
 * one connection per host and worker thread and opens another only when that one is full; Node's
 * cluster gives each connection to one service worker, for the connection's whole life. Uncapped,
 * one service worker takes every stream of an Envoy thread. With 4, Envoy opens a connection per 4
 * concurrent streams (an ext_proc stream lasts the whole request), and the primary deals those
 * connections out in turn. The price is connections: concurrency / 4 of them per Envoy thread.
 */
export const WORKER_STREAMS_PER_CONNECTION = 4;

/** The cap for a service with `workers` processes; undefined (Envoy's unlimited default) for one. */
export function serviceMaxConcurrentStreams(workers: number | undefined): number | undefined {
  return workers !== undefined && workers > 1 ? WORKER_STREAMS_PER_CONNECTION : undefined;
}
