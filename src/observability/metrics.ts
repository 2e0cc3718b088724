/**
 * Prometheus metrics: the upstream coordinator's families (`llm_d_coordinator_*`)
 * with the same names, labels and buckets, plus the ext_proc view (`epd_coordinator_*`).
 *
 * One {@link CoordinatorMetrics} owns its own Registry and implements the pipeline, side-call and
 * stream observer interfaces, so neither the pipeline nor the protocol layer imports prom-client.
 * The families updated per request, side call, stream or ext_proc message are fast-metrics.ts ones
 * (a child per label-value tuple, kept: the hot path is a Map lookup and a few adds, no
 * prom-client hashing); process, queue and health metrics stay prom-client's. Every label value
 * passed here is bounded, so the children are too: `model_name` by {@link ModelNameLabels}, the
 * rest by enums, `KNOWN_MESSAGES` and the configured steps and phases.
 */
import { Registry } from 'prom-client';
import type { CounterSeries, GaugeSeries, HistogramSeries } from './fast-metrics';
import { OWN, coordinatorFamilies, type CoordinatorFamilies } from './metric-families';
import { registerProcessMetrics } from './event-loop-metrics';
import type { SideCallObserver, SideCallObservation } from '../gateway/client';
import type { StreamObserver } from '../extproc/server';
import type { ForceStreamObserver } from '../pipeline/step';
import { classify } from '../pipeline/errors';
import { errorCode, executionPath, routeLabel } from './request-facts';
import { registerQueueGauges, type QueueStatsSource } from './queue-metrics';
import { KNOWN_MESSAGES, ModelNameLabels, probeResult, statusLabel } from './metric-labels';

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

interface ModelSeries {
  /** The bounded `model_name` value. */
  readonly model: string;
  readonly total: CounterSeries;
  readonly running: GaugeSeries;
  readonly duration: HistogramSeries;
  readonly size: HistogramSeries;
  readonly tokens: HistogramSeries;
}

/**
 * One step's series, and its observation: made once per step name and handed to every run of that
 * step. Why not a closure per run: the executor times the step anyway and passes the duration, so
 * nothing per run needs keeping (no object and no clock read per step of every request).
 */
class StepSeries implements StepObservation {
  constructor(
    private readonly step: string,
    readonly running: GaugeSeries,
    private readonly duration: HistogramSeries,
    private readonly errors: CoordinatorFamilies['stepErrors'],
  ) {}

  ended(ms: number, error?: unknown): void {
    this.running.dec();
    this.duration.observe(ms / 1000);
    if (error !== undefined) this.errors.labels(this.step, errorCode(classify(error, '').errorClass)).inc();
  }
}

interface PhaseSeries {
  readonly total: CounterSeries;
  readonly duration: HistogramSeries;
}

export interface MetricsOptions {
  /** Node.js process metrics (`process_*`, `nodejs_*`) in the same registry. Default true. */
  readonly processMetrics?: boolean;
  /** Sampling interval of the event-loop-delay monitor behind `nodejs_eventloop_lag_*`, ms (default 500, see event-loop-metrics.ts). */
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
  private readonly messageSeries = new Map<string, CounterSeries>();
  /** The families, registered in exposition order (metric-families.ts). */
  private readonly families: CoordinatorFamilies;

  constructor(opts: MetricsOptions = {}) {
    this.models = new ModelNameLabels(opts.maxModelNames);
    this.families = coordinatorFamilies(this.registry, opts.workerIndex);

    if (opts.processMetrics ?? true) {
      registerProcessMetrics(this.registry, opts.eventLoopMonitoringPrecisionMs);
    }

    this.sideCalls = { started: (phase) => this.sideCallStarted(phase) };
    this.forceStream = {
      result: (model, result) => this.families.forceStreamTotal.labels(this.models.label(model), result).inc(),
      reservedBytes: (bytes) => this.families.forceStreamBuffered.set(bytes),
    };
    this.streams = {
      received: (message) => this.messageReceived(message),
      opened: () => {
        this.families.activeStreams.inc();
        this.families.workerStreams?.inc();
        const started = performance.now();
        return () => {
          this.families.activeStreams.dec();
          this.families.streamDuration.observe((performance.now() - started) / 1000);
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
    this.families.decisions.labels(path).inc();
  }

  requestStarted(start: RequestStart): RequestObservation {
    this.families.inflight.inc();
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
      finished: (result) => this.requestFinished(series, result, start.path, (result.endedAt - began) / 1000),
    };
  }

  private requestFinished(series: ModelSeries, r: RequestResult, path: string, seconds: number): void {
    this.families.inflight.dec();
    series.running.dec();
    series.total.inc();
    series.duration.observe(seconds);
    const model = series.model;
    if (r.errorClass !== undefined) this.families.requestErrors.labels(model, errorCode(r.errorClass)).inc();
    if (r.inputTokens !== null) series.tokens.observe(r.inputTokens);
    const exec = executionPath(r.stepsStarted, r.disaggregation);
    if (exec) this.families.executionPaths.labels(model, exec).inc();
    if (r.disaggregation) this.families.disaggregation.labels(r.disaggregation).inc();
    this.families.decisions.labels(r.path satisfies DecisionPath).inc();
    this.families.overhead.labels(routeLabel(path)).observe(Math.max(0, seconds - (r.parseMs + r.stepMs) / 1000));
  }

  private stepStarted(step: string): StepObservation {
    let s = this.stepSeries.get(step);
    if (!s) {
      const f = this.families;
      s = new StepSeries(step, f.stepRunning.labels(step), f.stepDuration.labels(step), f.stepErrors);
      this.stepSeries.set(step, s);
    }
    s.running.inc();
    return s;
  }

  private sideCallStarted(phase: string): SideCallObservation {
    let p = this.phaseSeries.get(phase);
    if (!p) {
      p = { total: this.families.upstreamTotal.labels(phase), duration: this.families.upstreamDuration.labels(phase) };
      this.phaseSeries.set(phase, p);
    }
    const series = p;
    const began = performance.now();
    return {
      ended: (outcome, noEndpoint) => {
        const seconds = (performance.now() - began) / 1000;
        if (noEndpoint !== undefined) this.families.sideCallNoEndpoint.labels(phase, noEndpoint).inc();
        series.total.inc();
        series.duration.observe(seconds);
        this.families.sideCallDuration.labels(phase, statusLabel(outcome)).observe(seconds);
        if (phase === 'conditional-decode') this.families.probes.labels(probeResult(outcome)).inc();
      },
    };
  }

  private messageReceived(message: string): void {
    let c = this.messageSeries.get(message);
    if (!c) {
      // Envoy's oneof names only: a bounded label set whatever arrives.
      const label = KNOWN_MESSAGES.has(message) ? message : 'other';
      c = this.families.extProcMessages.labels(label);
      if (this.messageSeries.size < KNOWN_MESSAGES.size + 1) this.messageSeries.set(message, c);
    }
    c.inc();
  }

  private forModel(label: string): ModelSeries {
    let s = this.modelSeries.get(label);
    if (!s) {
      s = {
        model: label,
        total: this.families.requestTotal.labels(label),
        running: this.families.requestRunning.labels(label),
        duration: this.families.requestDuration.labels(label),
        size: this.families.requestSize.labels(label),
        tokens: this.families.requestTokens.labels(label),
      };
      this.modelSeries.set(label, s);
    }
    return s;
  }
}
