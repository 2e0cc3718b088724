/**
 * What the loopback EPP stack (launch/epp-stack.ts) runs: its port plan, the coordinator config, and
 * the command lines of llm-d-inference-sim, the llm-d EPP and llm-d-async.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { freePort } from './ports';
import type { WorkerRole } from './epp-topology';

/** The model every worker serves (llm-d-inference-sim checks it; our sim accepts any). */
export const EPP_STACK_MODEL = 'Qwen/Qwen3-VL-2B-Instruct';

export interface EppStackPorts {
  readonly public: number;
  readonly gateway: number;
  readonly admin: number;
  readonly extProc: number;
  readonly metrics: number;
  readonly eppGrpc: number;
  readonly eppHealth: number;
  readonly eppMetrics: number;
  readonly render: number;
  /** One port per worker, in order; the name is `sim-<role>-<i>`. */
  readonly workers: ReadonlyArray<{ role: WorkerRole; port: number }>;
  readonly redis?: number;
  /** Envoy's entry for llm-d-async's dispatches (the `async` listener of launch/epp-topology.ts). */
  readonly asyncEntry?: number;
  readonly asyncHealth?: number;
  readonly asyncMetrics?: number;
}

/** The loopback port plan (all 127.0.0.1), for `npm run stack -- --epp BIN`. */
export const EPP_STACK_PORTS: EppStackPorts = {
  public: 8080,
  gateway: 8081,
  admin: 19000,
  extProc: 50051,
  metrics: 9464,
  eppGrpc: 9002,
  eppHealth: 9003,
  eppMetrics: 9090,
  render: 8082,
  workers: [
    { role: 'encode', port: 8100 },
    { role: 'prefill', port: 8200 },
    { role: 'decode', port: 8300 },
  ],
};

/** Distinct free loopback ports; `workers` gives the roles in order. */
export async function freeEppStackPorts(workers: readonly WorkerRole[], withAsync = false): Promise<EppStackPorts> {
  const taken = new Set<number>();
  const next = async (): Promise<number> => {
    let p = await freePort();
    while (taken.has(p)) p = await freePort();
    taken.add(p);
    return p;
  };
  const ports = {
    public: await next(),
    gateway: await next(),
    admin: await next(),
    extProc: await next(),
    metrics: await next(),
    eppGrpc: await next(),
    eppHealth: await next(),
    eppMetrics: await next(),
    render: await next(),
    workers: [] as Array<{ role: WorkerRole; port: number }>,
    ...(withAsync ? { redis: await next(), asyncEntry: await next(), asyncHealth: await next(), asyncMetrics: await next() } : {}),
  };
  for (const role of workers) ports.workers.push({ role, port: await next() });
  return ports;
}

/** The coordinator config: the upstream e2e pipeline (kv-nixl, ec-nixl) with the probe and the async broker. */
export function eppStackCoordinatorConfig(o: {
  ports: EppStackPorts;
  useOpenaiFormat: boolean;
  conditionalDecode: boolean;
  logLevel: number;
}): string {
  const steps: unknown[] = [];
  if (o.ports.redis)
    steps.push({ type: 'async-broker', params: { redis_url: `redis://127.0.0.1:${o.ports.redis}/0`, wait_cap_seconds: 55 } });
  steps.push(
    { type: 'replace-media-urls', params: { download_timeout: '30s', max_concurrent_downloads: 10 } },
    { type: 'render', params: { address: `http://127.0.0.1:${o.ports.render}`, timeout: '60s' } },
    ...(o.conditionalDecode ? [{ type: 'conditional-decode' }] : []),
    { type: 'encode', params: { max_parallel: 8 } },
    { type: 'prefill' },
    { type: 'decode' },
  );
  const doc = {
    log_level: o.logLevel,
    server: {
      listen_addr: `127.0.0.1:${o.ports.extProc}`,
      max_request_body_size: 64,
      body_mode: 'auto',
      metrics_addr: `127.0.0.1:${o.ports.metrics}`,
      shutdown_timeout: '1s',
    },
    gateway: { address: `http://127.0.0.1:${o.ports.gateway}`, timeout: '60s' },
    pipeline: { kv_connector: 'kv-nixl', ec_connector: 'ec-nixl', use_openai_format: o.useOpenaiFormat, steps },
  };
  return `# Written by launch/epp-stack.ts for this run.\n${yaml.dump(doc, { lineWidth: 120 })}`;
}

export function simArgv(role: WorkerRole | 'render', port: number, extra: readonly string[], logHttp = true): string[] {
  const common = [
    `--model=${EPP_STACK_MODEL}`,
    '--force-dummy-tokenizer',
    '--max-model-len=131072',
    '--max-request-body-size-mb=64',
    `--port=${port}`,
    '--seed=42',
  ];
  const http = logHttp ? ['--log-http'] : [];
  // The render service logs its requests too, so a suite can see which render route a request used.
  if (role === 'render') return [...common, '--mode=echo', ...http];
  const logged = [...common, ...http, '--enable-request-id-headers', ...extra];
  if (role === 'encode') return [...logged, '--mm-encoder-only', '--no-enable-prefix-caching'];
  if (role === 'decode') return [...logged, '--mode=echo', '--enable-kvcache=false', '--kv-cache-size=1024', '--block-size=16'];
  return logged;
}

/** Envoy on the stack's config: one worker, no hot restart, a quick drain; `logLevel` for its own log. */
export function eppStackEnvoyArgv(envoyConfigPath: string, logLevel = 'info'): string[] {
  return [
    '-c',
    envoyConfigPath,
    '--concurrency',
    '1',
    '--disable-hot-restart',
    '--log-level',
    logLevel,
    '--file-flush-interval-msec',
    '200',
    '--drain-time-s',
    '1',
    '--drain-strategy',
    'immediate',
  ];
}

/** The EPP: file discovery, plaintext h2c, no tracing; its ext_proc port opens once the file loaded. */
export function eppArgv(ports: EppStackPorts, eppConfigPath: string): string[] {
  return [
    '--pool-name',
    'local-epd',
    '--pool-namespace',
    'local',
    '--config-file',
    eppConfigPath,
    '--grpc-port',
    String(ports.eppGrpc),
    '--grpc-health-port',
    String(ports.eppHealth),
    '--metrics-port',
    String(ports.eppMetrics),
    '--secure-serving=false',
    '--tracing=false',
    '--enable-pprof=false',
    '--allow-experimental-plugins=true',
    '--metrics-endpoint-auth=false',
    '--refresh-metrics-interval=250ms',
    '--v=2',
  ];
}

/** llm-d-async starts only with a kubeconfig file; any valid one will do (it never dials it here). */
export function writeKubeconfig(dir: string): string {
  const kubeconfig = join(dir, 'kubeconfig.yaml');
  writeFileSync(
    kubeconfig,
    yaml.dump({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'none',
      clusters: [{ name: 'none', cluster: { server: 'https://127.0.0.1:1' } }],
      contexts: [{ name: 'none', context: { cluster: 'none', user: 'none' } }],
      users: [{ name: 'none', user: {} }],
    }),
  );
  return kubeconfig;
}

/** llm-d-async on the stack's Redis, dispatching to its own Envoy entry (else the public listener). */
export function llmdAsyncArgv(ports: EppStackPorts): string[] {
  const transport = {
    url: `redis://127.0.0.1:${ports.redis}/0`,
    // Its own Envoy entry: there the fairness id and objective it stamps are trusted (docs/hardening.md).
    queues: [
      {
        queue_name: 'request-sortedset',
        igw_base_url: `http://127.0.0.1:${ports.asyncEntry ?? ports.public}`,
        result_ttl_seconds: 300,
      },
    ],
  };
  return [
    '--transport',
    'redis-sortedset',
    '--transport-config',
    JSON.stringify(transport),
    '--health-port',
    String(ports.asyncHealth ?? 0),
    '--metrics-port',
    String(ports.asyncMetrics ?? 0),
    '--metrics-endpoint-auth=false',
    '--metrics-backlog-poll-interval',
    '0',
    '--concurrency',
    '8',
  ];
}
