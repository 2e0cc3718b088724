import type { Logger } from 'pino';
import type { Sampler, SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { AppConfig } from './config/config';
import { startExtProcServer, type ExtProcServer } from './extproc/server';
import { PooledSideCallClient, type SideCallClient } from './gateway/client';
import { buildPipeline } from './pipeline/builder';
import { PipelineHandler } from './pipeline/handler';
import { parseForwardResponseHeaders } from './pipeline/response-headers';
import { ConfigError } from './config/errors';
import { requestLimits } from './pipeline/request-limits';
import { DEFAULT_PATH_POLICY, pathPolicy, PathPolicyError, type PathPolicy } from './pipeline/path-policy';
import { ASYNC_PROCESSOR_ORIGIN, headerPolicy, HeaderPolicyError, type HeaderPolicy } from './pipeline/header-policy';
import { combineObservers } from './pipeline/observer';
import { StepRegistry } from './pipeline/registry';
import type { Route, StepDeps } from './pipeline/step';
import { registerBuiltinSteps } from './steps';
import { pipelineCoverage } from './steps/pipeline-coverage';
import { HealthService, type DependencyCheck, type ReadinessCheck } from './observability/health';
import { createLogger } from './observability/logger';
import { CoordinatorMetrics } from './observability/metrics';
import { registerHealthGauges } from './observability/health-metrics';
import { startMetricsServer, type MetricsServer } from './observability/metrics-server';
import { combineSideCallObservers } from './observability/side-call-observers';
import { serverCredentials } from './server-tls';

export interface ServiceOptions {
  readonly log?: Logger;
  /** Readiness checks besides those the steps bring (a step with `ping()` or `ready()`). */
  readonly readinessChecks?: readonly ReadinessCheck[];
  /** Readiness poll period, ms. Default 5000. */
  readonly readinessIntervalMs?: number;
  /** Where spans go when `tracing` is on; default OTLP/HTTP (`OTEL_EXPORTER_OTLP_ENDPOINT`). */
  readonly spanExporter?: SpanExporter;
  /** Overrides the sampler when `tracing` is on (tests: always on). */
  readonly spanSampler?: Sampler;
  /** Registers step types beyond the built-in ones (tests, extensions). */
  readonly registerSteps?: (registry: StepRegistry) => void;
  /**
   * Set in a `server.workers` > 1 worker: the cluster primary serves `/metrics`, so this process
   * hands it its registry (over IPC) instead of listening on `server.metrics_addr`.
   */
  readonly worker?: { readonly index: number; exportMetrics(registry: CoordinatorMetrics['registry']): void };
}

export interface RunningService {
  readonly grpcPort: number;
  /** The `/metrics` port, or `null` when `server.metrics_addr` is off. */
  readonly metricsPort: number | null;
  readonly health: HealthService;
  /** Streams still being processed. */
  activeStreams(): number;
  /**
   * Drains: health NOT_SERVING, new streams refused after `server.drain_delay`, in-flight ones may finish for `graceMs`
   * (default `server.shutdown_timeout`), then everything closes. Idempotent.
   */
  close(graceMs?: number): Promise<void>;
}

function named(check: () => Promise<boolean>, name: string): ReadinessCheck {
  Object.defineProperty(check, 'name', { value: name });
  return check;
}

/** `server.trusted_client_headers` and `server.trusted_origin_headers` as a policy; a name it cannot trust stops start-up. */
function trustedHeaders(names: readonly string[], originNames: readonly string[]): HeaderPolicy {
  let key = 'server.trusted_client_headers';
  try {
    headerPolicy(names);
    key = 'server.trusted_origin_headers';
    return headerPolicy(names, { [ASYNC_PROCESSOR_ORIGIN]: originNames });
  } catch (err) {
    if (err instanceof HeaderPolicyError) throw new ConfigError(key, err.expected, err.header);
    throw err;
  }
}

/** `server.allowed_paths` as a policy (unset: the built-in list); an entry it cannot serve stops start-up. */
function allowedPaths(entries: readonly string[] | undefined): PathPolicy {
  if (entries === undefined) return DEFAULT_PATH_POLICY;
  try {
    return pathPolicy(entries);
  } catch (err) {
    if (err instanceof PathPolicyError) throw new ConfigError('server.allowed_paths', err.expected, err.entry);
    throw err;
  }
}

/** Wires config -> side-call clients -> steps -> handler -> gRPC server (+ health, metrics, tracing), and starts listening. */
export async function startService(config: AppConfig, opts: ServiceOptions = {}): Promise<RunningService> {
  const log = opts.log ?? createLogger(config.logLevel);
  // Certificates first: a bad file should stop start-up before anything connects anywhere.
  const tls = serverCredentials(config.server.tls, { log });
  const metrics = config.server.metricsAddr ? new CoordinatorMetrics({ workerIndex: opts.worker?.index }) : undefined;
  // Loaded only when on: the OpenTelemetry SDK and exporter add about 6 MB of RSS to every replica.
  const tracing = config.tracing
    ? new (await import('./observability/tracing')).Tracing({ log, exporter: opts.spanExporter, sampler: opts.spanSampler })
    : undefined;
  const sideCallObserver = combineSideCallObservers([metrics?.sideCalls, tracing?.sideCalls]);

  const cleanups: Array<() => Promise<unknown>> = [];
  const cleanup = async (): Promise<void> => {
    for (const c of cleanups.reverse()) await c().catch((err: unknown) => log.warn({ err: (err as Error).message }, 'close failed'));
    cleanups.length = 0;
  };

  cleanups.push(async () => tls.close());
  try {
    const policy = trustedHeaders(config.server.trustedClientHeaders, config.server.trustedOriginHeaders);
    const paths = allowedPaths(config.server.allowedPaths);
    if (config.server.allowedPaths)
      log.info({ allowed_paths: config.server.allowedPaths }, 'serving the paths of server.allowed_paths only');
    if (tracing) cleanups.push(() => tracing.shutdown());
    const clients: SideCallClient[] = [];
    cleanups.push(() => Promise.all(clients.map((c) => c.close())));
    const gateway = config.gateway.address
      ? new PooledSideCallClient(config.gateway.address, {
          maxIdleConns: config.gateway.maxIdleConnsPerHost,
          idleTimeoutMs: config.gateway.idleConnTimeoutMs,
          observer: sideCallObserver,
        })
      : undefined;
    if (gateway) clients.push(gateway);
    const routes: Route[] = [];
    const deps: StepDeps = {
      gateway,
      clientFor: (baseUrl, o) => {
        const c = new PooledSideCallClient(baseUrl, {
          maxIdleConns: o.maxIdleConns,
          idleTimeoutMs: o.idleTimeoutMs,
          observer: sideCallObserver,
        });
        clients.push(c);
        return c;
      },
      gatewayTimeoutMs: config.gateway.timeoutMs,
      log,
      registerRoute: (route) => routes.push(route),
      forceStream: metrics?.forceStream,
    };
    const registry = new StepRegistry();
    registerBuiltinSteps(registry);
    opts.registerSteps?.(registry);
    const steps = buildPipeline(config.pipeline, registry, deps);
    const coverage = pipelineCoverage(config.pipeline.steps.map((s) => s.type));
    for (const w of coverage.warnings) log.warn(w);

    const checks: ReadinessCheck[] = [...(opts.readinessChecks ?? [])];
    const dependencies: DependencyCheck[] = [];
    for (const step of steps) {
      if (step.close) cleanups.push(() => step.close!());
      // A dependency that is down at start-up stops the service (exit 1), as upstream.
      if (step.start) await step.start();
      // ready() gates readiness; ping() only reports a dependency (the async broker fails open).
      if (step.ready) checks.push(named(() => step.ready!(), step.type));
      else if (step.ping) dependencies.push({ name: step.type, check: () => step.ping!() });
    }

    metrics?.watchQueues(steps.filter((s) => s.queueStats).map((s) => () => s.queueStats!()));

    const handler = new PipelineHandler({
      steps,
      routes,
      maxBodyBytes: config.server.maxRequestBodyBytes,
      log,
      forwardResponseHeaders: parseForwardResponseHeaders(config.pipeline.forwardResponseHeaders),
      observer: combineObservers([metrics, tracing].filter((o) => o !== undefined)),
      headerPolicy: policy,
      pathPolicy: paths,
      admit: coverage.admit,
      requestLimits: requestLimits(config.pipeline.requestLimits),
    });
    const health = new HealthService({ checks, dependencies, intervalMs: opts.readinessIntervalMs, log });
    cleanups.push(async () => health.stopPolling());
    if (metrics)
      registerHealthGauges(
        metrics.registry,
        health,
        dependencies.map((d) => d.name),
      );

    let metricsServer: MetricsServer | undefined;
    if (metrics && opts.worker) opts.worker.exportMetrics(metrics.registry);
    else if (metrics && config.server.metricsAddr) {
      metricsServer = await startMetricsServer(config.server.metricsAddr, metrics, log);
      const ms = metricsServer;
      cleanups.push(() => ms.close());
    }

    const server: ExtProcServer = await startExtProcServer({
      address: config.server.listenAddr,
      credentials: tls.credentials,
      configure: (s) => health.addTo(s),
      healthCheck: (name) => health.status(name),
      handler,
      maxBodyBytes: config.server.maxRequestBodyBytes,
      metadataNamespace: config.server.metadataNamespace,
      fallbackBodyMode: config.server.bodyMode === 'buffered' ? 'buffered' : 'full_duplex',
      streamObserver: metrics?.streams,
      streamedResponses: config.server.streamedResponses,
      streamIdleTimeoutMs: config.server.streamIdleTimeoutMs,
      maxRequestHeaders: config.server.maxRequestHeaders,
      sessionLimits: config.server.sessionLimits,
      log,
    });
    cleanups.push(async () => server.forceShutdown());
    await health.start();
    log.info(
      {
        port: server.port,
        address: config.server.listenAddr,
        tls: config.server.tls ? (tls.mutual ? 'mtls' : 'tls') : 'off',
        tls_certificate: tls.mode,
        metrics_port: metricsServer?.port ?? null,
        tracing: config.tracing,
        steps: config.pipeline.steps.map((s) => s.type),
        gateway: config.gateway.address,
      },
      'epd-coordinator listening',
    );

    let closed: Promise<void> | undefined;
    return {
      grpcPort: server.port,
      metricsPort: metricsServer?.port ?? null,
      health,
      activeStreams: () => server.activeStreams(),
      close: (graceMs = config.server.shutdownTimeoutMs) =>
        (closed ??= (async () => {
          health.drain();
          // Until Envoy's health check has seen NOT_SERVING it may still pick this replica: refusing
          // its streams now would fail those requests.
          if (config.server.drainDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, config.server.drainDelayMs));
          const cancelled = await server.drain(graceMs);
          if (cancelled > 0) log.warn({ cancelled, grace_ms: graceMs }, 'drain timeout: cancelled the streams still open');
          await cleanup();
        })()),
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
