/**
 * What a compare topology gives the runner: a URL per setup, the PIDs whose CPU and memory are
 * measured, and where our service's /metrics is. Two topologies implement it: `deploy`
 * (deploy-stack.ts, as users deploy: the EPP on the gateway listener, Go behind its own Envoy
 * listener) and `direct` (direct-stack.ts, the earlier bench: header-routed gateway, no EPP, the
 * client straight at Go).
 */
import yaml from 'js-yaml';

/**
 * `node` is the floor of any Node coordinator (compare/bare-coordinator.ts: the same legs, no
 * framework), behind an Envoy of its own (compare/node-floor.ts); chat cases only.
 */
export type Setup = 'floor' | 'ours' | 'go' | 'node';
export const SETUPS: readonly Setup[] = ['floor', 'ours', 'go', 'node'];
export type Topology = 'deploy' | 'direct';
export type Phase = 'fast' | 'realistic';

export interface CompareStack {
  readonly topology: Topology;
  /** The model every worker serves. */
  readonly model: string;
  /** The setups this stack runs, `floor`, `ours` and `go` always. */
  readonly setups: readonly Setup[];
  readonly urls: Readonly<Partial<Record<Setup, string>>>;
  /** Headers of the floor's request (it enters the gateway listener, which wants a profile). */
  readonly floorHeaders: Readonly<Record<string, string>>;
  readonly pids: {
    readonly ours: number;
    readonly go: number;
    readonly envoy: number;
    readonly epp?: number;
    /** The bare Node coordinator and the Envoy in front of it (the `node` setup). */
    readonly node?: number;
    readonly nodeEnvoy?: number;
  };
  /** Our service's Prometheus endpoint (heap figures). */
  readonly oursMetricsUrl: string;
  /** Envoy admin, for the service cluster's counters. */
  readonly adminUrl: string;
  stop(): Promise<void>;
}

export interface StackArgs {
  /** The node binary our service runs on. */
  readonly serviceNode: string;
  /** Extra node flags for our service (`--max-semi-space-size=...`). */
  readonly serviceNodeFlags: readonly string[];
  /** Extra environment for our service (`MALLOC_ARENA_MAX=2`). */
  readonly serviceEnv: Readonly<Record<string, string>>;
  readonly cpuProfileDir?: string;
  /** `sim/` workers instead of llm-d-inference-sim (direct topology only). */
  readonly ownSims: boolean;
}

/** Simulator latency flags of a phase (llm-d-inference-sim spelling). */
export function simLatencyArgs(phase: Phase): string[] {
  return phase === 'realistic' ? ['--time-to-first-token=20ms', '--inter-token-latency=5ms'] : [];
}

/**
 * The upstream e2e `coordinatorConfigNIXL`, local addresses, log level 2: about seven info lines a
 * request (`received request`, `sending request`, `complete`, `pipeline step timings`), where ours
 * writes one or two, batched.
 */
export function goCoordinatorConfig(o: { port: number; gatewayPort: number; renderPort: number; multimodal: boolean }): string {
  const steps = [
    ...(o.multimodal ? [{ type: 'replace-media-urls', params: { download_timeout: '30s', max_concurrent_downloads: 10 } }] : []),
    { type: 'render', params: { address: `http://127.0.0.1:${o.renderPort}`, timeout: '60s' } },
    ...(o.multimodal ? [{ type: 'encode', params: { max_parallel: 8 } }] : []),
    { type: 'prefill' },
    { type: 'decode' },
  ];
  return yaml.dump({
    log_level: 2,
    server: {
      listen_addr: `127.0.0.1:${o.port}`,
      read_timeout: '30s',
      write_timeout: '120s',
      shutdown_timeout: '1s',
      max_request_body_size: 64,
    },
    gateway: { address: `http://127.0.0.1:${o.gatewayPort}`, max_idle_conns_per_host: 100, idle_conn_timeout: '90s', timeout: '60s' },
    pipeline: { kv_connector: 'kv-nixl', ec_connector: 'ec-nixl', use_openai_format: true, steps },
  });
}
