/**
 * Prometheus metrics: the upstream coordinator's families (`llm_d_coordinator_*`)
 * with the same names, labels and buckets, plus the ext_proc view (`epd_coordinator_*`).
 *
 * One {@link CoordinatorMetrics} owns its own Registry and implements the pipeline, side-call and
 * stream observer interfaces, so neither the pipeline nor the protocol layer imports prom-client.
 * Label children are cached per label value: the hot path is a Map lookup and a few adds.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { registerProcessMetrics } from './event-loop-metrics';
import type { SideCallObserver, SideCallObservation } from '../gateway/client';
import type { StreamObserver } from '../extproc/server';
import type { ForceStreamObserver } from '../pipeline/step';
import { classify } from '../pipeline/errors';
import { errorCode, executionPath, routeLabel } from './request-facts';
import { registerQueueGauges, type QueueStatsSource } from './queue-metrics';
import { KNOWN_MESSAGES, LATENCY_BUCKETS, ModelNameLabels, SIZE_BUCKETS, TOKEN_BUCKETS, probeResult, statusLabel } from './metric-labels';

export { LATENCY_BUCKETS, MAX_MODEL_NAME_LENGTH, MAX_MODEL_NAMES, ModelNameLabels, SIZE_BUCKETS, TOKEN_BUCKETS } from './metric-labels';
import type {
  DecisionPath,
  OutsideDecision,
  PipelineObserver,
  RequestObservation,
  RequestResult,
  RequestStart,
  StepObservation,
} from '../pipeline/observer';

const UPSTREAM = 'llm_d_coordinator_';
const OWN = 'epd_coordinator_';

interface ModelSeries {
  /** The bounded `model_name` value. */
  readonly model: string;
  readonly total: Counter.Internal;
  readonly running: Gauge.Internal<string>;
  readonly duration: Histogram.Internal<string>;
  readonly size: Histogram.Internal<string>;
  readonly tokens: Histogram.Internal<string>;
}

interface StepSeries {
  readonly running: Gauge.Internal<string>;
  readonly duration: Histogram.Internal<string>;
}

interface PhaseSeries {
  readonly total: Counter.Internal;
  readonly duration: Histogram.Internal<string>;
}

export interface MetricsOptions {
  /** Node.js process metrics (`process_*`, `nodejs_*`) in the same registry. Default true. */
  readonly processMetrics?: boolean;
  /** Sampling interval of the event-loop-delay monitor behind `nodejs_eventloop_lag_*`, ms (default: once a second, see event-loop-metrics.ts). */
  readonly eventLoopMonitoringPrecisionMs?: number;
  readonly maxModelNames?: number;
  /**
   * Set in a `server.workers` > 1 worker: its slot, the `worker` label of
   * `epd_coordinator_worker_streams_total`, which shows how Envoy's connections spread the load.
   */
  readonly workerIndex?: number;
}

export class CoordinatorMetrics implements PipelineObserver {
  readonly registry = new Registry();
  /** Pass to every side-call client. */
  readonly sideCalls: SideCallObserver;
  /** Pass to the ext_proc server. */
  readonly streams: StreamObserver;
  /** Pass to the steps (decode `force_stream`). */
  readonly forceStream: ForceStreamObserver;

  private readonly models: ModelNameLabels;
  private readonly modelSeries = new Map<string, ModelSeries>();
  private readonly stepSeries = new Map<string, StepSeries>();
  private readonly phaseSeries = new Map<string, PhaseSeries>();

  private readonly requestTotal: Counter;
  private readonly requestErrors: Counter;
  private readonly requestDuration: Histogram;
  private readonly requestSize: Histogram;
  private readonly requestTokens: Histogram;
  private readonly requestRunning: Gauge;
  private readonly stepDuration: Histogram;
  private readonly stepErrors: Counter;
  private readonly stepRunning: Gauge;
  private readonly upstreamTotal: Counter;
  private readonly upstreamDuration: Histogram;
  private readonly executionPaths: Counter;
  private readonly probes: Counter;
  private readonly overhead: Histogram;
  private readonly inflight: Gauge;
  private readonly activeStreams: Gauge;
  private readonly streamDuration: Histogram;
  private readonly decisions: Counter;
  private readonly sideCallDuration: Histogram;
  private readonly sideCallNoEndpoint: Counter;
  private readonly disaggregation: Counter;
  private readonly forceStreamTotal: Counter;
  private readonly forceStreamBuffered: Gauge;
  private readonly extProcMessages: Counter;
  private readonly messageSeries = new Map<string, Counter.Internal>();
  private readonly workerStreams: Counter.Internal | undefined;

  constructor(opts: MetricsOptions = {}) {
    const registers = [this.registry];
    const latency = [...LATENCY_BUCKETS];
    this.models = new ModelNameLabels(opts.maxModelNames);

    this.requestTotal = new Counter({
      name: `${UPSTREAM}request_total`,
      help: 'Inbound inference requests, including rejected ones.',
      labelNames: ['model_name'],
      registers,
    });
    this.requestErrors = new Counter({
      name: `${UPSTREAM}request_error_total`,
      help: 'Inference requests that ended in an error answer.',
      labelNames: ['model_name', 'error_code'],
      registers,
    });
    this.requestDuration = new Histogram({
      name: `${UPSTREAM}request_duration_seconds`,
      help: 'Time from the request head to the decision (the decode response itself does not pass through the service).',
      labelNames: ['model_name'],
      buckets: latency,
      registers,
    });
    this.requestSize = new Histogram({
      name: `${UPSTREAM}request_size_bytes`,
      help: 'Request body size.',
      labelNames: ['model_name'],
      buckets: [...SIZE_BUCKETS],
      registers,
    });
    this.requestTokens = new Histogram({
      name: `${UPSTREAM}request_input_tokens`,
      help: 'Prompt tokens, observed when render ran.',
      labelNames: ['model_name'],
      buckets: [...TOKEN_BUCKETS],
      registers,
    });
    this.requestRunning = new Gauge({
      name: `${UPSTREAM}request_running`,
      help: 'Inference requests in progress (model_name "unknown" until the body is parsed).',
      labelNames: ['model_name'],
      registers,
    });
    this.stepDuration = new Histogram({
      name: `${UPSTREAM}step_duration_seconds`,
      help: 'Pipeline step duration.',
      labelNames: ['step'],
      buckets: latency,
      registers,
    });
    this.stepErrors = new Counter({
      name: `${UPSTREAM}step_errors_total`,
      help: 'Pipeline steps that failed.',
      labelNames: ['step', 'error_code'],
      registers,
    });
    this.stepRunning = new Gauge({ name: `${UPSTREAM}step_running`, help: 'Pipeline steps in progress.', labelNames: ['step'], registers });
    this.upstreamTotal = new Counter({
      name: `${UPSTREAM}upstream_request_total`,
      help: 'Side calls to workers and the render service (each encode sub-request counts).',
      labelNames: ['upstream'],
      registers,
    });
    this.upstreamDuration = new Histogram({
      name: `${UPSTREAM}upstream_request_duration_seconds`,
      help: 'Side-call duration (streamed answers: to the response headers).',
      labelNames: ['upstream'],
      buckets: latency,
      registers,
    });
    this.executionPaths = new Counter({
      name: `${UPSTREAM}execution_path_total`,
      help: 'Requests by the disaggregation path their steps took.',
      labelNames: ['model_name', 'path'],
      registers,
    });
    this.probes = new Counter({
      name: `${UPSTREAM}conditional_decode_probes_total`,
      help: 'Conditional-decode probes by result.',
      labelNames: ['result'],
      registers,
    });
    this.overhead = new Histogram({
      name: `${UPSTREAM}orchestration_overhead_seconds`,
      help: 'Request time outside body parsing and steps.',
      labelNames: ['route'],
      buckets: latency,
      registers,
    });

    this.forceStreamTotal = new Counter({
      name: `${UPSTREAM}force_stream_total`,
      help: 'Non-streaming requests considered for decode force_stream, by result: forced, fallback_budget, fallback_unbounded, fallback_unsupported, error_ceiling.',
      labelNames: ['model_name', 'result'],
      registers,
    });
    this.forceStreamBuffered = new Gauge({
      name: `${UPSTREAM}force_stream_buffered_bytes`,
      help: 'Bytes currently reserved by buffered force-stream requests.',
      registers,
    });

    this.extProcMessages = new Counter({
      name: `${OWN}extproc_messages_total`,
      help: 'ext_proc messages Envoy sent, by kind (request_headers, request_body, response_headers, ...).',
      labelNames: ['message'],
      registers,
    });
    this.inflight = new Gauge({ name: `${OWN}inflight_requests`, help: 'Inference requests the service is working on.', registers });
    this.activeStreams = new Gauge({ name: `${OWN}extproc_active_streams`, help: 'Open ext_proc Process streams.', registers });
    this.streamDuration = new Histogram({
      name: `${OWN}extproc_stream_duration_seconds`,
      help: 'Lifetime of ext_proc Process streams.',
      buckets: latency,
      registers,
    });
    this.decisions = new Counter({
      name: `${OWN}decisions_total`,
      help: 'Decisions by path taken: cascade, cache_hit, step_response, error, passthrough, route.',
      labelNames: ['path'],
      registers,
    });
    this.sideCallDuration = new Histogram({
      name: `${OWN}side_call_duration_seconds`,
      help: 'Side-call latency by phase and HTTP status (or error, timeout, cancelled).',
      labelNames: ['phase', 'status'],
      buckets: latency,
      registers,
    });
    this.sideCallNoEndpoint = new Counter({
      name: `${OWN}side_call_no_endpoint_total`,
      help: 'Side calls the EPP answered "no endpoint" (429 rejected-saturated or 503 rejected-no-endpoints, with its no-endpoints message), by phase and reason.',
      labelNames: ['phase', 'reason'],
      registers,
    });
    this.disaggregation = new Counter({
      name: `${OWN}disaggregation_total`,
      help: 'Requests a prefill step saw, by path: disaggregated, aggregated_short_prompt (below min_prompt_tokens), aggregated_fallback (no prefill endpoint).',
      labelNames: ['path'],
      registers,
    });

    this.workerStreams =
      opts.workerIndex === undefined
        ? undefined
        : new Counter({
            name: `${OWN}worker_streams_total`,
            help: 'ext_proc streams each worker process opened (server.workers > 1 only): whether Envoy spreads its connections over the workers.',
            labelNames: ['worker'],
            registers,
          }).labels(String(opts.workerIndex));

    if (opts.processMetrics ?? true) {
      registerProcessMetrics(this.registry, opts.eventLoopMonitoringPrecisionMs);
    }

    this.sideCalls = { started: (phase) => this.sideCallStarted(phase) };
    this.forceStream = {
      result: (model, result) => this.forceStreamTotal.labels(this.models.label(model), result).inc(),
      reservedBytes: (bytes) => this.forceStreamBuffered.set(bytes),
    };
    this.streams = {
      received: (message) => this.messageReceived(message),
      opened: () => {
        this.activeStreams.inc();
        this.workerStreams?.inc();
        const started = performance.now();
        return () => {
          this.activeStreams.dec();
          this.streamDuration.observe((performance.now() - started) / 1000);
        };
      },
    };
  }

  /** Adds the async broker's backlog gauges, read from `sources` at scrape time. Call once. */
  watchQueues(sources: readonly QueueStatsSource[]): void {
    if (sources.length > 0) registerQueueGauges(this.registry, OWN, sources);
  }

  /** The exposition text and its content type, for the `/metrics` handler. */
  async exposition(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  decided(path: OutsideDecision): void {
    this.decisions.labels(path).inc();
  }

  requestStarted(start: RequestStart): RequestObservation {
    this.inflight.inc();
    let series = this.forModel('unknown');
    series.running.inc();
    const began = performance.now();
    return {
      parsed: (ctx, bodyBytes) => {
        const label = this.models.label(ctx.model);
        if (label !== 'unknown') {
          series.running.dec();
          series = this.forModel(label);
          series.running.inc();
        }
        series.size.observe(bodyBytes);
      },
      stepStarted: (step) => this.stepStarted(step),
      finished: (result) => this.requestFinished(series, result, start.path, (performance.now() - began) / 1000),
    };
  }

  private requestFinished(series: ModelSeries, r: RequestResult, path: string, seconds: number): void {
    this.inflight.dec();
    series.running.dec();
    series.total.inc();
    series.duration.observe(seconds);
    const model = series.model;
    if (r.errorClass !== undefined) this.requestErrors.labels(model, errorCode(r.errorClass)).inc();
    if (r.inputTokens !== null) series.tokens.observe(r.inputTokens);
    const exec = executionPath(r.stepsStarted, r.disaggregation);
    if (exec) this.executionPaths.labels(model, exec).inc();
    if (r.disaggregation) this.disaggregation.labels(r.disaggregation).inc();
    this.decisions.labels(r.path satisfies DecisionPath).inc();
    this.overhead.labels(routeLabel(path)).observe(Math.max(0, seconds - (r.parseMs + r.stepMs) / 1000));
  }

  private stepStarted(step: string): StepObservation {
    let s = this.stepSeries.get(step);
    if (!s) {
      s = { running: this.stepRunning.labels(step), duration: this.stepDuration.labels(step) };
      this.stepSeries.set(step, s);
    }
    const series = s;
    series.running.inc();
    const began = performance.now();
    return {
      ended: (error) => {
        series.running.dec();
        series.duration.observe((performance.now() - began) / 1000);
        if (error !== undefined) this.stepErrors.labels(step, errorCode(classify(error, '').errorClass)).inc();
      },
    };
  }

  private sideCallStarted(phase: string): SideCallObservation {
    let p = this.phaseSeries.get(phase);
    if (!p) {
      p = { total: this.upstreamTotal.labels(phase), duration: this.upstreamDuration.labels(phase) };
      this.phaseSeries.set(phase, p);
    }
    const series = p;
    const began = performance.now();
    return {
      ended: (outcome, noEndpoint) => {
        const seconds = (performance.now() - began) / 1000;
        if (noEndpoint !== undefined) this.sideCallNoEndpoint.labels(phase, noEndpoint).inc();
        series.total.inc();
        series.duration.observe(seconds);
        this.sideCallDuration.labels(phase, statusLabel(outcome)).observe(seconds);
        if (phase === 'conditional-decode') this.probes.labels(probeResult(outcome)).inc();
      },
    };
  }

  private messageReceived(message: string): void {
    let c = this.messageSeries.get(message);
    if (!c) {
      // Envoy's oneof names only: a bounded label set whatever arrives.
      const label = KNOWN_MESSAGES.has(message) ? message : 'other';
      c = this.extProcMessages.labels(label);
      if (this.messageSeries.size < KNOWN_MESSAGES.size + 1) this.messageSeries.set(message, c);
    }
    c.inc();
  }

  private forModel(label: string): ModelSeries {
    let s = this.modelSeries.get(label);
    if (!s) {
      s = {
        model: label,
        total: this.requestTotal.labels(label),
        running: this.requestRunning.labels(label),
        duration: this.requestDuration.labels(label),
        size: this.requestSize.labels(label),
        tokens: this.requestTokens.labels(label),
      };
      this.modelSeries.set(label, s);
    }
    return s;
  }
}
