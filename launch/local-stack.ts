/**
 * The product as separate processes on loopback: four simulators (render, encode, prefill,
 * decode), the coordinator CLI and Envoy with the shipped bootstrap. Shared by `npm run stack`
 * (fixed ports) and `npm run bench` (free ports).
 */
import { redisServerArgs } from './redis-args';
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { startEnvoy, type EnvoyHandle } from './envoy';
import { SHIPPED_NODE_FLAGS } from './service-node-flags';
import { canBind, freePort } from './ports';
import { REPO_ROOT, type EnvoyBodyMode } from './envoy-bootstrap';
import { startChild, stopAll, type Child } from './supervise';

export interface LocalStackPorts {
  readonly public: number;
  readonly gateway: number;
  readonly admin: number;
  /** Envoy's async-processor entry (the `async` listener). */
  readonly async: number;
  readonly extProc: number;
  readonly render: number;
  readonly encode: number;
  readonly prefill: number;
  readonly decode: number;
  /** Prometheus `/metrics` of the coordinator; 0 = any free port. */
  readonly metrics?: number;
  /** Redis for the async broker; absent = no async broker in the pipeline. */
  readonly redis?: number;
}

/** The loopback port plan (all 127.0.0.1): one fixed port per process. */
export const STACK_PORTS: LocalStackPorts = {
  public: 8080,
  gateway: 8081,
  admin: 19000,
  async: 8084,
  extProc: 50051,
  render: 8082,
  encode: 8100,
  prefill: 8200,
  decode: 8300,
  metrics: 9464,
  // Not 6379: a Redis the machine may already run there is not ours to write into.
  redis: 6380,
};

export interface LocalStackOptions {
  /** Configs, logs and the access log go here. */
  readonly dir: string;
  readonly ports: LocalStackPorts;
  readonly bodyMode: EnvoyBodyMode;
  readonly kvConnector: string;
  /** Coordinator verbosity (1-5). */
  readonly logLevel?: number;
  /** Extra simulator flags, e.g. `--inter-token-latency-ms 20`. */
  readonly simArgs?: readonly string[];
  /**
   * Probe with `conditional-decode` (after render) before the cascade. The decode simulator always
   * stands in for the EPP's gate (412 unless the prompt prefix was served before); with this off
   * nothing sends it `Prefer: if-available`, so every request is a plain cascade. Default false.
   */
  readonly conditionalDecode?: boolean;
  /** Params of the `prefill` step (e.g. `min_prompt_tokens`). Default none. */
  readonly prefillParams?: Record<string, unknown>;
  /**
   * The multimodal steps too (replace-media-urls before render, encode before prefill): what
   * `npm run stack` runs. Default false, so the benchmarks keep measuring the text P/D cascade.
   */
  readonly multimodal?: boolean;
  /** Access-log flush interval. */
  readonly flushIntervalMs?: number;
  /** Write V8 CPU profiles of the coordinator (`--cpu-prof`) into this directory, for benchmarks. */
  readonly cpuProfileDir?: string;
  /**
   * Run the coordinator as it ships: the compiled `dist/src/main.js` on plain node (built first by
   * the caller, see {@link buildService}), not the TypeScript sources through tsx. Benchmarks use it:
   * tsx turns on source maps, which make every error's stack trace (an HTTP/2 stream reset, say)
   * several times dearer than in production.
   */
  readonly builtService?: boolean;
  /** Node flags of the built service; default {@link SHIPPED_NODE_FLAGS}, as it ships. */
  readonly serviceNodeFlags?: readonly string[];
  /** Progress messages. */
  readonly say?: (msg: string) => void;
  /** The coordinator's `server.workers` (Envoy's cluster then caps streams per connection). Default 1. */
  readonly serviceWorkers?: number;
  /** The `server.workers` Envoy's bootstrap is rendered for, when it differs (benchmarks: the cap alone). */
  readonly envoyServiceWorkers?: number;
}

export interface LocalStack {
  readonly publicUrl: string;
  readonly gatewayUrl: string;
  readonly adminUrl: string;
  readonly accessLogPath: string;
  readonly configPath: string;
  /** Every child, in start order, with its PID. */
  readonly pids: ReadonlyArray<{ name: string; pid: number }>;
  /** Resolves with the name of the first child that exits on its own. */
  readonly firstExit: Promise<string>;
  /** Stops Envoy, then the coordinator, then the simulators, each by PID. */
  stop(): Promise<void>;
}

/** A distinct free loopback port for every role (no Redis: benchmarks run without the async broker). */
export async function freeStackPorts(): Promise<LocalStackPorts> {
  const names = ['public', 'gateway', 'admin', 'async', 'extProc', 'render', 'encode', 'prefill', 'decode'] as const;
  const ports: Partial<Record<(typeof names)[number], number>> = {};
  const taken = new Set<number>();
  for (const n of names) {
    let p = await freePort();
    while (taken.has(p)) p = await freePort();
    taken.add(p);
    ports[n] = p;
  }
  return ports as LocalStackPorts;
}

export class PortsBusyError extends Error {
  override readonly name = 'PortsBusyError';
  constructor(readonly busy: ReadonlyArray<{ role: string; port: number }>) {
    super(`port(s) already in use on 127.0.0.1: ${busy.map((b) => `${b.port} (${b.role})`).join(', ')}`);
  }
}

/** Refuses to start over anything already listening on a planned port. */
export async function checkPortsFree(ports: LocalStackPorts): Promise<void> {
  const busy: Array<{ role: string; port: number }> = [];
  for (const [role, port] of Object.entries(ports)) {
    if (port !== 0 && !(await canBind(port))) busy.push({ role, port });
  }
  if (busy.length > 0) throw new PortsBusyError(busy);
}

/** A 1x1 PNG, inline: the image the stack's example request carries (no download needed). */
const STACK_IMAGE_URI =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

/** The multimodal request `npm run stack` prints and the README shows (a test keeps them equal). */
export const STACK_IMAGE_REQUEST = JSON.stringify({
  model: 'sim-model',
  messages: [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is in this image?' },
        { type: 'image_url', image_url: { url: STACK_IMAGE_URI } },
      ],
    },
  ],
});

/**
 * The stack's pipeline: the full E/P/D cascade. The async broker must run first (a no-op for
 * requests without the X-AP-Mode header); conditional decode probes after render, before encode,
 * so a hit skips encode and prefill.
 */
export function stackSteps(opts: {
  renderUrl: string;
  redisUrl?: string;
  conditionalDecode?: boolean;
  multimodal?: boolean;
  prefillParams?: Record<string, unknown>;
}): Array<{ type: string; params?: Record<string, unknown> }> {
  const multimodal = opts.multimodal ?? true;
  return [
    ...(opts.redisUrl ? [{ type: 'async-broker', params: { redis_url: opts.redisUrl, wait_cap_seconds: 55 } }] : []),
    ...(multimodal ? [{ type: 'replace-media-urls' }] : []),
    { type: 'render', params: { address: opts.renderUrl, timeout: '30s' } },
    ...(opts.conditionalDecode ? [{ type: 'conditional-decode' }] : []),
    ...(multimodal ? [{ type: 'encode' }] : []),
    opts.prefillParams ? { type: 'prefill', params: opts.prefillParams } : { type: 'prefill' },
    { type: 'decode' },
  ];
}

export function coordinatorConfig(
  opts: Pick<
    LocalStackOptions,
    'ports' | 'kvConnector' | 'logLevel' | 'conditionalDecode' | 'multimodal' | 'prefillParams' | 'serviceWorkers'
  >,
): string {
  const doc = {
    log_level: opts.logLevel ?? 2,
    server: {
      listen_addr: `127.0.0.1:${opts.ports.extProc}`,
      max_request_body_size: 64,
      body_mode: 'auto',
      metrics_addr: `127.0.0.1:${opts.ports.metrics ?? 0}`,
      ...(opts.serviceWorkers !== undefined && opts.serviceWorkers > 1 ? { workers: opts.serviceWorkers } : {}),
    },
    gateway: { address: `http://127.0.0.1:${opts.ports.gateway}`, timeout: '60s' },
    pipeline: {
      kv_connector: opts.kvConnector,
      use_openai_format: true,
      steps: stackSteps({
        renderUrl: `http://127.0.0.1:${opts.ports.render}`,
        redisUrl: opts.ports.redis ? `redis://127.0.0.1:${opts.ports.redis}/0` : undefined,
        conditionalDecode: opts.conditionalDecode,
        multimodal: opts.multimodal ?? false,
        prefillParams: opts.prefillParams,
      }),
    },
  };
  return `# Written by launch/local-stack.ts for this run; edits are overwritten.\n${yaml.dump(doc, { lineWidth: 120 })}`;
}

/** Compiles the project into dist/ (`npm run build`), for {@link LocalStackOptions.builtService}. */
export function buildService(say: (msg: string) => void = () => undefined): void {
  say('building dist/ (tsc)');
  execFileSync(process.execPath, [join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(REPO_ROOT, 'tsconfig.json')], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
}

/** Runs TypeScript entry points in one node process (no wrapper that would relay signals twice). */
function tsNode(entry: string, args: readonly string[], nodeFlags: readonly string[] = []): { command: string; args: string[] } {
  return { command: process.execPath, args: [...nodeFlags, '--import', 'tsx', join(REPO_ROOT, entry), ...args] };
}

export async function startLocalStack(opts: LocalStackOptions): Promise<LocalStack> {
  const say = opts.say ?? (() => undefined);
  const { ports, dir } = opts;
  mkdirSync(dir, { recursive: true });
  const children: Child[] = [];
  let envoy: EnvoyHandle | undefined;

  const stop = async (): Promise<void> => {
    await envoy?.stop();
    // Reverse start order: the coordinator before the workers it calls.
    await stopAll([...children].reverse());
  };

  try {
    const roles = [
      ['render', ports.render],
      ['encode', ports.encode],
      ['prefill', ports.prefill],
      ['decode', ports.decode],
    ] as const;
    for (const [role, port] of roles) {
      const name = `sim-${role}-0`;
      // The decode pool answers `Prefer: if-available` as the EPP would (sim/prefix-cache.ts).
      const gate = role === 'decode' ? ['--honour-prefer-if-available', 'true'] : [];
      const cmd = tsNode('sim/cli.ts', [
        '--port',
        String(port),
        '--name',
        name,
        '--role',
        role,
        '--mode',
        'echo',
        ...gate,
        ...(opts.simArgs ?? []),
      ]);
      children.push(await startChild({ name, ...cmd, cwd: REPO_ROOT, logPath: join(dir, `${name}.log`), ready: /^sim \S+ listening on / }));
      say(`${name} on 127.0.0.1:${port}`);
    }

    if (ports.redis) {
      const redisDir = join(dir, 'redis');
      mkdirSync(redisDir, { recursive: true });
      children.push(
        await startChild({
          name: 'redis',
          command: process.env['REDIS_SERVER_BIN'] ?? 'redis-server',
          args: redisServerArgs(ports.redis, redisDir),
          cwd: REPO_ROOT,
          logPath: join(dir, 'redis.log'),
          ready: /Ready to accept connections/,
        }),
      );
      say(`redis on 127.0.0.1:${ports.redis}`);
    }

    const configPath = join(dir, 'coordinator.yaml');
    writeFileSync(configPath, coordinatorConfig(opts));
    const profile = opts.cpuProfileDir ? ['--cpu-prof', `--cpu-prof-dir=${opts.cpuProfileDir}`] : [];
    const service = opts.builtService
      ? {
          command: process.execPath,
          args: [
            ...(opts.serviceNodeFlags ?? SHIPPED_NODE_FLAGS),
            ...profile,
            join(REPO_ROOT, 'dist', 'src', 'main.js'),
            '--config',
            configPath,
          ],
        }
      : tsNode('src/main.ts', ['--config', configPath], profile);
    children.push(
      await startChild({
        name: 'epd-coordinator',
        ...service,
        cwd: REPO_ROOT,
        logPath: join(dir, 'coordinator.log'),
        // Several workers: each logs its own "listening"; the primary says when all are.
        ready: (opts.serviceWorkers ?? 1) > 1 ? /"msg":"all workers listening"/ : /"msg":"epd-coordinator listening"/,
      }),
    );
    say(`epd-coordinator on 127.0.0.1:${ports.extProc} (config ${configPath})`);

    const accessLogPath = join(dir, 'envoy-access.log');
    envoy = await startEnvoy({
      dir: join(dir, 'envoy'),
      logLevel: 'warn',
      detached: true,
      flushIntervalMs: opts.flushIntervalMs ?? 500,
      bootstrap: {
        bodyMode: opts.bodyMode,
        publicPort: ports.public,
        gatewayPort: ports.gateway,
        adminPort: ports.admin,
        asyncPort: ports.async,
        extProcAddress: `127.0.0.1:${ports.extProc}`,
        encodeAddress: `127.0.0.1:${ports.encode}`,
        prefillAddress: `127.0.0.1:${ports.prefill}`,
        decodeAddress: `127.0.0.1:${ports.decode}`,
        accessLogPath,
        extProcWorkers: opts.envoyServiceWorkers ?? opts.serviceWorkers,
      },
    });
    say(`envoy on 127.0.0.1:${envoy.publicPort} (gateway ${envoy.gatewayPort}, admin ${envoy.adminUrl})`);

    if (ports.redis) {
      // The processor's own entry: there its stamped fairness id and objective are trusted (docs/hardening.md).
      const ap = tsNode('scripts/async-processor.ts', ['--redis-url', `redis://127.0.0.1:${ports.redis}/0`, '--igw', envoy.asyncUrl]);
      children.push(
        await startChild({
          name: 'async-processor',
          ...ap,
          cwd: REPO_ROOT,
          logPath: join(dir, 'async-processor.log'),
          ready: /^async-processor dispatching/,
        }),
      );
      say(`async processor dispatching to ${envoy.asyncUrl} (its own Envoy entry)`);
    }

    const running = envoy;
    const firstExit = Promise.race([...children.map((c) => c.exited.then(() => c.name)), running.exited.then(() => 'envoy')]);
    return {
      publicUrl: running.publicUrl,
      gatewayUrl: running.gatewayUrl,
      adminUrl: running.adminUrl,
      accessLogPath,
      configPath: running.configPath,
      pids: [...children.map((c) => ({ name: c.name, pid: c.pid })), { name: 'envoy', pid: running.pid }],
      firstExit,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
