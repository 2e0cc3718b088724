/**
 * The families {@link CoordinatorMetrics} updates per request, side call, stream and ext_proc
 * message: the upstream coordinator's (`llm_d_coordinator_*`, same names, labels and buckets) and
 * the ext_proc view (`epd_coordinator_*`), all fast-metrics.ts ones. Registered in this order, which
 * is the order of the exposition.
 */
import type { Registry } from 'prom-client';
import { Counter, Gauge, Histogram } from './fast-metrics';
import { LATENCY_BUCKETS, SIZE_BUCKETS, TOKEN_BUCKETS } from './metric-labels';

const UPSTREAM = 'llm_d_coordinator_';
export const OWN = 'epd_coordinator_';

export type CoordinatorFamilies = ReturnType<typeof coordinatorFamilies>;

/** `workerIndex`: set in a `server.workers` > 1 worker, its slot (the `worker` label). */
export function coordinatorFamilies(registry: Registry, workerIndex?: number) {
  const registers = [registry];
  return {
    requestTotal: new Counter({
      name: `${UPSTREAM}request_total`,
      help: 'Inbound inference requests, including rejected ones.',
      labelNames: ['model_name'],
      registers,
    }),
    requestErrors: new Counter({
      name: `${UPSTREAM}request_error_total`,
      help: 'Inference requests that ended in an error answer.',
      labelNames: ['model_name', 'error_code'],
      registers,
    }),
    requestDuration: new Histogram({
      name: `${UPSTREAM}request_duration_seconds`,
      help: 'Time from the request head to the decision (the decode response itself does not pass through the service).',
      labelNames: ['model_name'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    requestSize: new Histogram({
      name: `${UPSTREAM}request_size_bytes`,
      help: 'Request body size.',
      labelNames: ['model_name'],
      buckets: SIZE_BUCKETS,
      registers,
    }),
    requestTokens: new Histogram({
      name: `${UPSTREAM}request_input_tokens`,
      help: 'Prompt tokens, observed when render ran.',
      labelNames: ['model_name'],
      buckets: TOKEN_BUCKETS,
      registers,
    }),
    requestRunning: new Gauge({
      name: `${UPSTREAM}request_running`,
      help: 'Inference requests in progress (model_name "unknown" until the body is parsed).',
      labelNames: ['model_name'],
      registers,
    }),
    stepDuration: new Histogram({
      name: `${UPSTREAM}step_duration_seconds`,
      help: 'Pipeline step duration.',
      labelNames: ['step'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    stepErrors: new Counter({
      name: `${UPSTREAM}step_errors_total`,
      help: 'Pipeline steps that failed.',
      labelNames: ['step', 'error_code'],
      registers,
    }),
    stepRunning: new Gauge({ name: `${UPSTREAM}step_running`, help: 'Pipeline steps in progress.', labelNames: ['step'], registers }),
    upstreamTotal: new Counter({
      name: `${UPSTREAM}upstream_request_total`,
      help: 'Side calls to workers and the render service (each encode sub-request counts).',
      labelNames: ['upstream'],
      registers,
    }),
    upstreamDuration: new Histogram({
      name: `${UPSTREAM}upstream_request_duration_seconds`,
      help: 'Side-call duration (streamed answers: to the response headers).',
      labelNames: ['upstream'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    executionPaths: new Counter({
      name: `${UPSTREAM}execution_path_total`,
      help: 'Requests by the disaggregation path their steps took.',
      labelNames: ['model_name', 'path'],
      registers,
    }),
    probes: new Counter({
      name: `${UPSTREAM}conditional_decode_probes_total`,
      help: 'Conditional-decode probes by result.',
      labelNames: ['result'],
      registers,
    }),
    overhead: new Histogram({
      name: `${UPSTREAM}orchestration_overhead_seconds`,
      help: 'Request time outside body parsing and steps.',
      labelNames: ['route'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),

    forceStreamTotal: new Counter({
      name: `${UPSTREAM}force_stream_total`,
      help: 'Non-streaming requests considered for decode force_stream, by result: forced, fallback_budget, fallback_unbounded, fallback_unsupported, error_ceiling.',
      labelNames: ['model_name', 'result'],
      registers,
    }),
    forceStreamBuffered: new Gauge({
      name: `${UPSTREAM}force_stream_buffered_bytes`,
      help: 'Bytes currently reserved by buffered force-stream requests.',
      registers,
    }),

    extProcMessages: new Counter({
      name: `${OWN}extproc_messages_total`,
      help: 'ext_proc messages Envoy sent, by kind (request_headers, request_body, response_headers, ...).',
      labelNames: ['message'],
      registers,
    }),
    inflight: new Gauge({ name: `${OWN}inflight_requests`, help: 'Inference requests the service is working on.', registers }),
    activeStreams: new Gauge({ name: `${OWN}extproc_active_streams`, help: 'Open ext_proc Process streams.', registers }),
    streamDuration: new Histogram({
      name: `${OWN}extproc_stream_duration_seconds`,
      help: 'Lifetime of ext_proc Process streams.',
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    decisions: new Counter({
      name: `${OWN}decisions_total`,
      help: 'Decisions by path taken: cascade, cache_hit, step_response, error, passthrough, route.',
      labelNames: ['path'],
      registers,
    }),
    sideCallDuration: new Histogram({
      name: `${OWN}side_call_duration_seconds`,
      help: 'Side-call latency by phase and HTTP status (or error, timeout, cancelled).',
      labelNames: ['phase', 'status'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    sideCallNoEndpoint: new Counter({
      name: `${OWN}side_call_no_endpoint_total`,
      help: 'Side calls the EPP answered "no endpoint" (429 rejected-saturated or 503 rejected-no-endpoints, with its no-endpoints message), by phase and reason.',
      labelNames: ['phase', 'reason'],
      registers,
    }),
    disaggregation: new Counter({
      name: `${OWN}disaggregation_total`,
      help: 'Requests a prefill step saw, by path: disaggregated, aggregated_short_prompt (below min_prompt_tokens), aggregated_fallback (no prefill endpoint).',
      labelNames: ['path'],
      registers,
    }),
    /** This worker's series of `epd_coordinator_worker_streams_total` (server.workers > 1 only). */
    workerStreams:
      workerIndex === undefined
        ? undefined
        : new Counter({
            name: `${OWN}worker_streams_total`,
            help: 'ext_proc streams each worker process opened (server.workers > 1 only): whether Envoy spreads its connections over the workers.',
            labelNames: ['worker'],
            registers,
          }).labels(String(workerIndex)),
  };
}
