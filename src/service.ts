import type { Logger } from 'pino';
import type { AppConfig } from './config/config';
import { startExtProcServer, type ExtProcServer } from './extproc/server';
import { PooledSideCallClient, type SideCallClient } from './gateway/client';
import { buildPipeline } from './pipeline/builder';
import { PipelineHandler } from './pipeline/handler';
import { StepRegistry } from './pipeline/registry';
import type { Route, StepDeps } from './pipeline/step';
import { registerBuiltinSteps } from './steps';
import { createLogger } from './observability/logger';

export interface RunningService {
  readonly grpcPort: number;
  /** Streams still being processed. */
  activeStreams(): number;
  /** Stops taking new streams, lets in-flight ones finish up to `graceMs`, then closes everything. */
  close(graceMs?: number): Promise<void>;
}

/** A side-call client that fails every call: for pipelines that configure no gateway. */
function missingGateway(): SideCallClient {
  const fail = async (): Promise<never> => {
    throw new Error('gateway.address is not configured');
  };
  return { baseUrl: '', post: fail, postStreaming: fail, close: async () => {} };
}

/** Wires config -> side-call clients -> steps -> handler -> gRPC server, and starts listening. */
export async function startService(config: AppConfig, opts: { log?: Logger } = {}): Promise<RunningService> {
  const log = opts.log ?? createLogger(config.logLevel);
  const clients: SideCallClient[] = [];
  const gateway = config.gateway.address
    ? new PooledSideCallClient(config.gateway.address, {
        maxIdleConns: config.gateway.maxIdleConnsPerHost,
        idleTimeoutMs: config.gateway.idleConnTimeoutMs,
      })
    : missingGateway();
  clients.push(gateway);
  const routes: Route[] = [];
  const deps: StepDeps = {
    gateway,
    clientFor: (baseUrl, o) => {
      const c = new PooledSideCallClient(baseUrl, { maxIdleConns: o.maxIdleConns, idleTimeoutMs: o.idleTimeoutMs });
      clients.push(c);
      return c;
    },
    gatewayTimeoutMs: config.gateway.timeoutMs,
    log,
    registerRoute: (route) => routes.push(route),
  };
  const registry = new StepRegistry();
  registerBuiltinSteps(registry);
  const steps = buildPipeline(config.pipeline, registry, deps);
  const handler = new PipelineHandler({ steps, routes, maxBodyBytes: config.server.maxRequestBodyBytes, log });

  const server: ExtProcServer = await startExtProcServer({
    address: config.server.listenAddr,
    handler,
    maxBodyBytes: config.server.maxRequestBodyBytes,
    metadataNamespace: config.server.metadataNamespace,
    fallbackBodyMode: config.server.bodyMode === 'buffered' ? 'buffered' : 'full_duplex',
    log,
  });
  log.info(
    { port: server.port, address: config.server.listenAddr, steps: config.pipeline.steps.map((s) => s.type), gateway: config.gateway.address },
    'epd-coordinator listening',
  );

  let closed: Promise<void> | undefined;
  return {
    grpcPort: server.port,
    activeStreams: () => server.activeStreams(),
    close: (graceMs = config.server.shutdownTimeoutMs) =>
      (closed ??= (async () => {
        await server.shutdown(graceMs);
        await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
      })()),
  };
}
