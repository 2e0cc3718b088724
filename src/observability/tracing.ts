/**
 * OpenTelemetry spans for `tracing: true`: one server span per inference request
 * (child of the client's `traceparent`), one `pipeline` span, one span per step, one client span per
 * side call. The trace context travels as W3C headers, not through an async context manager:
 *
 * - a step span is stamped on the request as `traceparent` (`ctx.stampHeader`), so every side call
 *   the step makes (they copy `ctx.forwardedHeaders()`), and the final request Envoy forwards,
 *   carry it;
 * - the side-call observer reads that header, starts its span as a child, and sends the span's
 *   own `traceparent`.
 *
 * With tracing off none of this is constructed: the client's `traceparent` and `tracestate` reach
 * every side call anyway, as ordinary forwarded headers.
 */
import {
  createTraceState,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type Span,
  type SpanContext,
  type Tracer,
} from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
  type ReadableSpan,
  type Sampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';
import type { SideCallObservation, SideCallObserver } from '../gateway/client';
import type { PipelineObserver, RequestObservation, RequestStart, StepObservation } from '../pipeline/observer';
import { executionPath } from './request-facts';

export const TRACER_NAME = 'epd-coordinator/pipeline';
export const TRACEPARENT = 'traceparent';
export const TRACESTATE = 'tracestate';
/** Upstream's sampler when `OTEL_TRACES_SAMPLER` is not set: parent-based, 10 % of new traces. */
export const DEFAULT_SAMPLE_RATIO = 0.1;
/** W3C caps tracestate at 32 members; a header far longer than that is not worth parsing. */
const MAX_TRACESTATE_LENGTH = 4096;
/** Span status descriptions are ours (error messages never carry upstream bodies), still kept short. */
const MAX_STATUS_MESSAGE = 256;

const TRACEPARENT_RE = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** The span context a W3C `traceparent` (and `tracestate`) names, or undefined when invalid. */
export function parseTraceparent(traceparent: string | undefined, tracestate?: string): SpanContext | undefined {
  if (!traceparent) return undefined;
  const m = TRACEPARENT_RE.exec(traceparent.trim());
  if (!m) return undefined;
  const [, version, traceId, spanId, flags, rest] = m;
  // Version ff is forbidden; version 00 has nothing after the flags; later versions may add fields.
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId!) || /^0+$/.test(spanId!)) return undefined;
  const ctx: SpanContext = { traceId: traceId!, spanId: spanId!, traceFlags: parseInt(flags!, 16) & TraceFlags.SAMPLED, isRemote: true };
  if (tracestate && tracestate.length <= MAX_TRACESTATE_LENGTH) return { ...ctx, traceState: createTraceState(tracestate) };
  return ctx;
}

export function formatTraceparent(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-0${sc.traceFlags & TraceFlags.SAMPLED}`;
}

function parentContext(headers: Readonly<Record<string, string>>): Context {
  const sc = parseTraceparent(headers[TRACEPARENT], headers[TRACESTATE]);
  return sc ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT;
}

function failureMessage(error: unknown): string {
  const e = error as { name?: unknown; message?: unknown } | null;
  const text = e && typeof e.message === 'string' ? `${String(e.name ?? 'Error')}: ${e.message}` : String(error);
  return text.length > MAX_STATUS_MESSAGE ? text.slice(0, MAX_STATUS_MESSAGE) + '...' : text;
}

/** Logs failed exports (a collector that is down) without flooding the log: at most once a minute. */
class LoggingExporter implements SpanExporter {
  private lastLogged = -Infinity;

  constructor(
    private readonly inner: SpanExporter,
    private readonly log: Logger,
  ) {}

  export(spans: ReadableSpan[], done: Parameters<SpanExporter['export']>[1]): void {
    this.inner.export(spans, (result) => {
      if (result.error && performance.now() - this.lastLogged > 60_000) {
        this.lastLogged = performance.now();
        this.log.warn({ err: result.error.message, spans: spans.length }, 'tracing: span export failed (OTEL_EXPORTER_OTLP_ENDPOINT)');
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

export interface TracingOptions {
  readonly log: Logger;
  /** Default: OTLP over HTTP, endpoint from `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`. */
  readonly exporter?: SpanExporter;
  /** Default: `OTEL_TRACES_SAMPLER` when set, else parent-based with ratio {@link DEFAULT_SAMPLE_RATIO}. */
  readonly sampler?: Sampler;
  /** Export every span as it ends (tests); default batched. */
  readonly exportImmediately?: boolean;
  readonly env?: NodeJS.ProcessEnv;
}

export class Tracing implements PipelineObserver {
  readonly sideCalls: SideCallObserver;
  private readonly provider: BasicTracerProvider;
  private readonly tracer: Tracer;

  constructor(opts: TracingOptions) {
    const env = opts.env ?? process.env;
    const exporter = new LoggingExporter(opts.exporter ?? new OTLPTraceExporter(), opts.log);
    const sampler =
      opts.sampler ??
      (env['OTEL_TRACES_SAMPLER'] ? undefined : new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(DEFAULT_SAMPLE_RATIO) }));
    this.provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ 'service.name': env['OTEL_SERVICE_NAME'] || 'epd-coordinator' }),
      ...(sampler ? { sampler } : {}),
      spanProcessors: [opts.exportImmediately ? new SimpleSpanProcessor(exporter) : new BatchSpanProcessor(exporter)],
    });
    this.tracer = this.provider.getTracer(TRACER_NAME);
    this.sideCalls = { started: (phase, path, headers) => this.sideCallStarted(phase, path, headers) };
  }

  decided(): void {
    // Routes and passthrough requests are not traced: only inference requests get spans.
  }

  requestStarted(start: RequestStart): RequestObservation {
    const attributes: Attributes = { 'http.request.method': start.method, 'url.path': start.path, 'http.route': start.path };
    const request = this.tracer.startSpan(
      `${start.method} ${start.path}`,
      { kind: SpanKind.SERVER, attributes },
      parentContext(start.headers),
    );
    const requestCtx = trace.setSpan(ROOT_CONTEXT, request);
    let pipeline: Span | undefined;
    let pipelineCtx: Context = requestCtx;
    let pipelineFailed = false;
    return {
      parsed: (ctx) => {
        pipeline = this.tracer.startSpan('pipeline', { kind: SpanKind.INTERNAL }, requestCtx);
        if (ctx.model !== '') pipeline.setAttribute('gen_ai.request.model', ctx.model.slice(0, MAX_STATUS_MESSAGE));
        request.setAttribute('llm_d.coordinator.request_id', ctx.requestId);
        pipelineCtx = trace.setSpan(ROOT_CONTEXT, pipeline);
      },
      stepStarted: (step, ctx): StepObservation => {
        const span = this.tracer.startSpan(step, { kind: SpanKind.INTERNAL }, pipelineCtx);
        // Every side call of this step, and the request Envoy finally forwards, descend from it.
        ctx.stampHeader(TRACEPARENT, formatTraceparent(span.spanContext()));
        return {
          ended: (_ms, error) => {
            if (error !== undefined) {
              span.setStatus({ code: SpanStatusCode.ERROR, message: failureMessage(error) });
              pipelineFailed = true;
            }
            span.end();
          },
        };
      },
      finished: (r) => {
        if (pipeline) {
          pipeline.setAttribute('llm_d.coordinator.pipeline.step_count', r.stepsStarted.length);
          const exec = executionPath(r.stepsStarted, r.disaggregation);
          if (exec) pipeline.setAttribute('llm_d.coordinator.pipeline.execution_path', exec);
          if (pipelineFailed || r.errorClass !== undefined)
            pipeline.setStatus({ code: SpanStatusCode.ERROR, message: r.errorClass ?? 'step failed' });
          pipeline.end();
        }
        request.setAttribute('llm_d.coordinator.path_taken', r.path);
        if (r.status !== undefined) request.setAttribute('http.response.status_code', r.status);
        if (r.errorClass !== undefined) {
          request.setAttribute('error.type', r.errorClass);
          request.setStatus({ code: SpanStatusCode.ERROR, message: `${r.errorClass} in ${r.errorStep ?? 'unknown step'}` });
        }
        request.end();
      },
    };
  }

  private sideCallStarted(phase: string, path: string, headers: Readonly<Record<string, string>>): SideCallObservation {
    const span = this.tracer.startSpan(
      `POST ${phase}`,
      { kind: SpanKind.CLIENT, attributes: { 'http.request.method': 'POST', 'url.path': path, 'llm_d.coordinator.phase': phase } },
      parentContext(headers),
    );
    return {
      headers: { ...headers, [TRACEPARENT]: formatTraceparent(span.spanContext()) },
      ended: (outcome) => {
        if (typeof outcome === 'number') {
          span.setAttribute('http.response.status_code', outcome);
          // A 412 is how a decode worker declines a conditional-decode probe: not a failure.
          const declined = outcome === 412 && phase === 'conditional-decode';
          if (outcome >= 400 && !declined) span.setStatus({ code: SpanStatusCode.ERROR, message: `HTTP ${outcome}` });
        } else {
          span.setAttribute('error.type', outcome);
          span.setStatus({ code: SpanStatusCode.ERROR, message: outcome });
        }
        span.end();
      },
    };
  }

  /** Exports what is buffered (bounded by `timeoutMs`) and stops. */
  async shutdown(timeoutMs = 2000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.provider.shutdown().catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }
}
