/**
 * The budget bench's in-process layers, each beside its floor in Node:
 * - the pipeline (the real steps render -> prefill -> decode, kv-nixl, with the service's metrics
 *   observer) over in-memory side calls (each leg's answer recorded once from our sim/ workers),
 *   against the floor of any pipeline: one JSON.parse and one JSON.stringify per leg;
 * - the side-call client (PooledSideCallClient) against a local keep-alive server, against a bare
 *   undici request on a pool.
 */
import { Pool } from 'undici';
import { parseConfig } from '../../src/config/config';
import { PooledSideCallClient } from '../../src/gateway/client';
import { buildPipeline } from '../../src/pipeline/builder';
import type { RequestHandler } from '../../src/pipeline/decision';
import { PipelineHandler } from '../../src/pipeline/handler';
import { StepRegistry } from '../../src/pipeline/registry';
import type { SideCallBody, SideCallClient, SideCallOptions, SideCallResponse } from '../../src/pipeline/side-call';
import type { StepDeps } from '../../src/pipeline/step';
import { registerBuiltinSteps } from '../../src/steps';
import { pipelineCoverage } from '../../src/steps/pipeline-coverage';
import { silentLogger } from '../../src/observability/logger';
import { CoordinatorMetrics } from '../../src/observability/metrics';

/** Answers each path with what the real worker answered the first time. */
class RecordedClient implements SideCallClient {
  private readonly answers = new Map<string, SideCallResponse>();
  constructor(private readonly real: SideCallClient) {}
  get baseUrl(): string {
    return this.real.baseUrl;
  }
  async post(path: string, headers: Record<string, string>, body: SideCallBody, opts: SideCallOptions): Promise<SideCallResponse> {
    const hit = this.answers.get(path);
    if (hit) return hit;
    const r = await this.real.post(path, headers, body, opts);
    this.answers.set(path, r);
    return r;
  }
  /** The recorded answers' bodies, in the order first seen. */
  bodies(): Buffer[] {
    return [...this.answers.values()].map((r) => r.body);
  }
  postStreaming(): never {
    throw new Error('the budget pipeline makes no streaming side calls');
  }
  close(): Promise<void> {
    return this.real.close();
  }
}

export interface PipelineLayer {
  readonly handler: RequestHandler;
  /** The bodies of the legs answered from memory, as recorded. */
  readonly recorded: () => Buffer[];
  close(): Promise<void>;
}

/** The service's wiring (src/service.ts) minus the gRPC server, its side calls recorded once. */
export function pipelineLayer(o: { gatewayUrl: string; renderUrl: string }): PipelineLayer {
  const config = parseConfig(
    {
      log_level: 1,
      server: { listen_addr: '127.0.0.1:0', metrics_addr: '127.0.0.1:0' },
      gateway: { address: o.gatewayUrl, timeout: '60s' },
      pipeline: {
        kv_connector: 'kv-nixl',
        use_openai_format: true,
        steps: [{ type: 'render', params: { address: o.renderUrl, timeout: '30s' } }, { type: 'prefill' }, { type: 'decode' }],
      },
    },
    {},
  );
  const metrics = new CoordinatorMetrics();
  const clients: RecordedClient[] = [];
  const recorded = (base: string) => {
    const c = new RecordedClient(new PooledSideCallClient(base, { maxIdleConns: 8, idleTimeoutMs: 60_000, observer: metrics.sideCalls }));
    clients.push(c);
    return c;
  };
  const log = silentLogger();
  const deps: StepDeps = {
    gateway: recorded(o.gatewayUrl),
    clientFor: (base) => recorded(base),
    gatewayTimeoutMs: config.gateway.timeoutMs,
    log,
    registerRoute: () => undefined,
    forceStream: metrics.forceStream,
  };
  const registry = registerBuiltinSteps(new StepRegistry());
  const steps = buildPipeline(config.pipeline, registry, deps);
  const handler = new PipelineHandler({
    steps,
    maxBodyBytes: config.server.maxRequestBodyBytes,
    log,
    observer: metrics,
    admit: pipelineCoverage(config.pipeline.steps.map((s) => s.type)).admit,
  });
  return {
    handler,
    recorded: () => clients.flatMap((c) => c.bodies()),
    close: async () => {
      await Promise.all(clients.map((c) => c.close()));
    },
  };
}

/** Runs one request through the handler as the ext_proc layer would; throws unless it forwards. */
export async function runPipelineOnce(handler: RequestHandler, body: Buffer, id: number): Promise<void> {
  const ex = handler.begin({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', 'x-request-id': `budget-${id}`, host: 'budget' },
  });
  if (!ex) throw new Error('the pipeline passed the request through');
  const d = await ex.complete(body);
  if (d.kind !== 'forward')
    throw new Error(`the pipeline answered ${d.status}: ${Buffer.isBuffer(d.body) ? d.body.toString().slice(0, 200) : ''}`);
}

/** The floor of any pipeline over the same legs: parse the client body once, serialise and parse each leg once. */
export function pipelineFloorOnce(body: Buffer, legAnswers: readonly Buffer[]): number {
  const req = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
  let size = 0;
  for (const answer of legAnswers) {
    size += JSON.stringify({ ...req, max_tokens: 1, stream: false }).length;
    const got = JSON.parse(answer.toString('utf8')) as Record<string, unknown>;
    req['kv_transfer_params'] = got['kv_transfer_params'] ?? null;
  }
  return size + Buffer.byteLength(JSON.stringify(req));
}

/** One call of our side-call client. */
export async function sideCallOnce(client: PooledSideCallClient, body: string): Promise<void> {
  const r = await client.post('/v1/chat/completions', { 'content-type': 'application/json', 'epp-profile': 'prefill' }, body, {
    step: 'prefill',
    signal: new AbortController().signal,
    totalTimeoutMs: 30_000,
  });
  if (r.status !== 200) throw new Error(`side call: HTTP ${r.status}`);
}

/** One bare undici request on a pool: the floor of a side call. */
export async function bareRequestOnce(pool: Pool, body: string): Promise<void> {
  const r = await pool.request({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', 'epp-profile': 'prefill' },
    body,
  });
  await r.body.arrayBuffer();
  if (r.statusCode !== 200) throw new Error(`bare request: HTTP ${r.statusCode}`);
}
