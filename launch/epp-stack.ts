/**
 * The no-Kubernetes production topology (launch/epp-topology.ts) run on loopback: workers
 * (llm-d-inference-sim with `simBin`, else our own sim/), a render worker, the real llm-d EPP with
 * file discovery, epd-coordinator, Envoy, and optionally Redis with the real llm-d-async processor.
 * Used by `npm run stack -- --epp BIN [--sim BIN]` and the real-peer suite (test/peers/).
 *
 * The binaries are prebuilt by the operator; nothing here builds them.
 */
import { redisServerArgs } from './redis-args';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { ensureEnvoy } from './envoy';
import { canBind, freePort, isListening, waitUntil } from './ports';
import { REPO_ROOT } from './envoy-bootstrap';
import {
  readinessGate,
  renderEndpointsFile,
  writeTopology,
  type ReadinessState,
  type WorkerEndpoint,
  type WorkerRole,
} from './epp-topology';
import { startChild, stopAll, type Child } from './supervise';

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

export interface EppStackOptions {
  readonly dir: string;
  readonly ports: EppStackPorts;
  /** The llm-d EPP binary (`cmd/epp`). */
  readonly eppBin: string;
  /** llm-d-inference-sim for every worker and the render service; unset = our sim/. */
  readonly simBin?: string;
  /** llm-d-async (needs `ports.redis`): the real async processor, dispatching to its own entry (`ports.asyncEntry`), else the public listener. */
  readonly asyncBin?: string;
  /** EPP re-reads the endpoints file on change. Default false (as the seed's launcher). */
  readonly watchFile?: boolean;
  /** Pipeline: `Prefer: if-available` probe after render. Default true. */
  readonly conditionalDecode?: boolean;
  /** `pipeline.use_openai_format`. Default true. */
  readonly useOpenaiFormat?: boolean;
  /** Coordinator verbosity (1-5). Default 2. */
  readonly logLevel?: number;
  /** Extra llm-d-inference-sim flags for every worker. */
  readonly simArgs?: readonly string[];
  /** Readiness gate deadline. Default 60 s. */
  readonly readyTimeoutMs?: number;
  readonly say?: (msg: string) => void;
}

export interface EppStack {
  readonly publicUrl: string;
  readonly gatewayUrl: string;
  readonly adminUrl: string;
  readonly eppMetricsUrl: string;
  readonly accessLogPath: string;
  readonly endpointsPath: string;
  readonly eppConfigPath: string;
  readonly envoyConfigPath: string;
  readonly coordinatorConfigPath: string;
  readonly endpoints: readonly WorkerEndpoint[];
  /** Log file of each child by name (`sim-decode-0`, `epp`, `envoy`, `epd-coordinator`, ...). */
  readonly logs: Readonly<Record<string, string>>;
  readonly pids: ReadonlyArray<{ name: string; pid: number }>;
  /** The first child (of those running when the stack came up) to exit on its own. */
  readonly firstExit: Promise<string>;
  /** The readiness gate now. */
  readiness(): Promise<ReadinessState>;
  /** Rewrites the endpoints file (takes effect only with `watchFile`). */
  writeEndpoints(endpoints: readonly WorkerEndpoint[]): void;
  /** Restarts epd-coordinator on the same port with a changed pipeline. */
  restartCoordinator(change: { useOpenaiFormat?: boolean; conditionalDecode?: boolean }): Promise<void>;
  stop(): Promise<void>;
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

/** llm-d-inference-sim's flags for one worker of the topology (render: a plain echo worker, no request log). */
export function simArgv(role: WorkerRole | 'render', port: number, extra: readonly string[]): string[] {
  const common = [
    `--model=${EPP_STACK_MODEL}`,
    '--force-dummy-tokenizer',
    '--max-model-len=131072',
    '--max-request-body-size-mb=64',
    `--port=${port}`,
    '--seed=42',
  ];
  // The render service logs its requests too, so a suite can see which render route a request used.
  if (role === 'render') return [...common, '--mode=echo', '--log-http'];
  const logged = [...common, '--log-http', '--enable-request-id-headers', ...extra];
  if (role === 'encode') return [...logged, '--mm-encoder-only', '--no-enable-prefix-caching'];
  if (role === 'decode') return [...logged, '--mode=echo', '--enable-kvcache=false', '--kv-cache-size=1024', '--block-size=16'];
  return logged;
}

async function httpOk(url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
    await res.arrayBuffer();
    return res.status === 200;
  } catch {
    return false;
  }
}

/** Any line at all: these programs are then polled on their health endpoint or port. */
const FIRST_LINE = /^/;

export async function startEppStack(opts: EppStackOptions): Promise<EppStack> {
  const say = opts.say ?? (() => undefined);
  const { ports, dir } = opts;
  mkdirSync(dir, { recursive: true });
  const children: Child[] = [];
  const logs: Record<string, string> = {};
  let coordinator: Child | undefined;
  let envoy: Child | undefined;
  const stop = async (): Promise<void> => {
    await envoy?.stop(3000);
    await coordinator?.stop(3000);
    await stopAll([...children].reverse(), 3000);
  };
  const start = async (
    name: string,
    spec: { command: string; args: string[]; env?: NodeJS.ProcessEnv; ready?: RegExp; readyTimeoutMs?: number },
  ): Promise<Child> => {
    const logPath = join(dir, `${name}.log`);
    logs[name] = logPath;
    const child = await startChild({
      name,
      cwd: REPO_ROOT,
      logPath,
      ready: spec.ready ?? FIRST_LINE,
      command: spec.command,
      args: spec.args,
      env: spec.env,
      readyTimeoutMs: spec.readyTimeoutMs,
    });
    return child;
  };
  const tsx = (entry: string, args: string[]) => ({
    command: process.execPath,
    args: ['--import', 'tsx', join(REPO_ROOT, entry), ...args],
  });

  try {
    // Workers and the render service.
    const counts: Partial<Record<WorkerRole, number>> = {};
    const endpoints: WorkerEndpoint[] = [];
    const workers: Array<{ name: string; role: WorkerRole | 'render'; port: number }> = [
      { name: 'sim-render-0', role: 'render', port: ports.render },
    ];
    for (const w of ports.workers) {
      const i = counts[w.role] ?? 0;
      counts[w.role] = i + 1;
      const name = `sim-${w.role}-${i}`;
      workers.push({ name, role: w.role, port: w.port });
      endpoints.push({ name, role: w.role, address: '127.0.0.1', port: w.port });
    }
    for (const w of workers) {
      const env = { ...process.env, POD_NAME: w.name, POD_NAMESPACE: 'local', GOMAXPROCS: '1', PYTHONHASHSEED: '42' };
      const spec = opts.simBin
        ? { command: opts.simBin, args: simArgv(w.role, w.port, opts.simArgs ?? []), env }
        : {
            ...tsx('sim/cli.ts', ['--port', String(w.port), '--name', w.name, '--role', w.role, '--mode', 'echo']),
            ready: /^sim \S+ listening on /,
          };
      const child = await start(w.name, spec);
      children.push(child);
      // llm-d-inference-sim exits 0 on a bad flag: supervise by /health, not by exit status.
      await waitUntil(
        async () => {
          if (!child.isRunning()) throw new Error(`${w.name} exited during start-up; see ${logs[w.name]}`);
          return httpOk(`http://127.0.0.1:${w.port}/health`);
        },
        `${w.name} /health`,
        30_000,
        100,
      );
      say(`${w.name} on 127.0.0.1:${w.port}${opts.simBin ? ' (llm-d-inference-sim)' : ''}`);
    }

    const files = writeTopology(join(dir, 'topology'), {
      endpoints,
      watchFile: opts.watchFile ?? false,
      envoy: {
        publicAddress: '127.0.0.1',
        publicPort: ports.public,
        gatewayPort: ports.gateway,
        adminPort: ports.admin,
        coordinatorAddress: `127.0.0.1:${ports.extProc}`,
        eppAddress: `127.0.0.1:${ports.eppGrpc}`,
        accessLogPath: join(dir, 'access.log'),
        ...(ports.asyncEntry ? { asyncPort: ports.asyncEntry } : {}),
      },
    });

    // The EPP: file discovery, plaintext h2c, no tracing; its ext_proc port opens once the file loaded.
    const epp = await start('epp', {
      command: opts.eppBin,
      args: [
        '--pool-name',
        'local-epd',
        '--pool-namespace',
        'local',
        '--config-file',
        files.eppConfigPath,
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
      ],
      env: { ...process.env, GOMAXPROCS: '1' },
    });
    children.push(epp);
    await waitUntil(
      async () => {
        if (!epp.isRunning())
          throw new Error(`the EPP exited during start-up; see ${logs['epp']}:\n${readFileSync(logs['epp']!, 'utf8').slice(-2000)}`);
        return isListening(ports.eppGrpc, 200);
      },
      'the EPP ext_proc port',
      30_000,
      100,
    );
    say(`epp on 127.0.0.1:${ports.eppGrpc} (metrics :${ports.eppMetrics}, config ${files.eppConfigPath})`);

    if (ports.redis) {
      const redisDir = join(dir, 'redis');
      mkdirSync(redisDir, { recursive: true });
      children.push(
        await start('redis', {
          command: process.env['REDIS_SERVER_BIN'] ?? 'redis-server',
          args: redisServerArgs(ports.redis, redisDir),
          ready: /Ready to accept connections/,
        }),
      );
      say(`redis on 127.0.0.1:${ports.redis}`);
    }

    let pipeline = { useOpenaiFormat: opts.useOpenaiFormat ?? true, conditionalDecode: opts.conditionalDecode ?? true };
    const coordinatorConfigPath = join(dir, 'coordinator.yaml');
    const startCoordinator = async (): Promise<Child> => {
      writeFileSync(coordinatorConfigPath, eppStackCoordinatorConfig({ ports, ...pipeline, logLevel: opts.logLevel ?? 2 }));
      const c = await start('epd-coordinator', {
        ...tsx('src/main.ts', ['--config', coordinatorConfigPath]),
        ready: /"msg":"epd-coordinator listening"/,
      });
      say(`epd-coordinator on 127.0.0.1:${ports.extProc} (config ${coordinatorConfigPath})`);
      return c;
    };
    coordinator = await startCoordinator();

    envoy = await start('envoy', {
      command: ensureEnvoy(),
      args: [
        '-c',
        files.envoyConfigPath,
        '--concurrency',
        '1',
        '--disable-hot-restart',
        '--log-level',
        'info',
        '--file-flush-interval-msec',
        '200',
        '--drain-time-s',
        '1',
        '--drain-strategy',
        'immediate',
      ],
      ready: /starting main dispatch loop/,
    });
    say(`envoy on 127.0.0.1:${ports.public} (gateway ${ports.gateway}, admin ${ports.admin})`);

    if (opts.asyncBin && ports.redis) {
      // llm-d-async starts only with a kubeconfig file; any valid one will do (it never dials it here).
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
      const ap = await start('llm-d-async', {
        command: opts.asyncBin,
        args: [
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
        ],
        env: { ...process.env, KUBECONFIG: kubeconfig, GOMAXPROCS: '1' },
      });
      children.push(ap);
      if (ports.asyncHealth) {
        await waitUntil(
          async () => {
            if (!ap.isRunning())
              throw new Error(
                `llm-d-async exited during start-up; see ${logs['llm-d-async']}:\n${readFileSync(logs['llm-d-async']!, 'utf8').slice(-2000)}`,
              );
            return isListening(ports.asyncHealth!, 200);
          },
          'llm-d-async health port',
          30_000,
          100,
        );
      }
      say(`llm-d-async dispatching request-sortedset to http://127.0.0.1:${ports.asyncEntry ?? ports.public}`);
    }

    const adminUrl = `http://127.0.0.1:${ports.admin}`;
    const eppMetricsUrl = `http://127.0.0.1:${ports.eppMetrics}/metrics`;
    let current: readonly WorkerEndpoint[] = endpoints;
    const readiness = () => readinessGate({ adminUrl, eppMetricsUrl, expectedEndpoints: current.length });
    let last: ReadinessState | undefined;
    await waitUntil(
      async () => (last = await readiness()).ready,
      `the readiness gate (last: ${JSON.stringify(last)})`,
      opts.readyTimeoutMs ?? 60_000,
      250,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; last state ${JSON.stringify(last)}`);
    });
    say(`ready: envoy /ready 200, llm_d_epp_ready_endpoints = ${current.length}`);

    const all = (): Child[] => [...children, ...(coordinator ? [coordinator] : []), ...(envoy ? [envoy] : [])];
    return {
      publicUrl: `http://127.0.0.1:${ports.public}`,
      gatewayUrl: `http://127.0.0.1:${ports.gateway}`,
      adminUrl,
      eppMetricsUrl,
      accessLogPath: join(dir, 'access.log'),
      endpointsPath: files.endpointsPath,
      eppConfigPath: files.eppConfigPath,
      envoyConfigPath: files.envoyConfigPath,
      coordinatorConfigPath,
      get endpoints() {
        return current;
      },
      logs,
      get pids() {
        return all().map((c) => ({ name: c.name, pid: c.pid }));
      },
      firstExit: Promise.race(all().map((c) => c.exited.then(() => c.name))),
      readiness,
      writeEndpoints: (eps) => {
        // Write then rename: the EPP's watcher sees one complete file (a Create event).
        const tmp = `${files.endpointsPath}.tmp`;
        writeFileSync(tmp, renderEndpointsFile(eps));
        renameSync(tmp, files.endpointsPath);
        current = eps;
      },
      restartCoordinator: async (change) => {
        pipeline = { ...pipeline, ...change };
        await coordinator?.stop(3000);
        coordinator = undefined;
        coordinator = await startCoordinator();
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * `npm run stack -- --epp BIN [--sim BIN] [--async BIN]`: the topology above on the port plan of
 * {@link EPP_STACK_PORTS} until Ctrl-C / SIGTERM. Configs and logs go under `<repo>/.stack-epp/`.
 */
export async function runEppStackCommand(bins: { epp: string; sim?: string; async?: string }): Promise<void> {
  const { rmSync } = await import('node:fs');
  const say = (msg: string) => process.stdout.write(`stack: ${msg}\n`);
  const dir = join(REPO_ROOT, '.stack-epp');
  rmSync(dir, { recursive: true, force: true });
  const ports: EppStackPorts = bins.async
    ? { ...EPP_STACK_PORTS, redis: 6380, asyncEntry: 8084, asyncHealth: 8083, asyncMetrics: 9091 }
    : EPP_STACK_PORTS;
  const planned = [
    ...Object.entries(ports).filter((e): e is [string, number] => typeof e[1] === 'number'),
    ...ports.workers.map((w, i) => [`${w.role}-${i}`, w.port] as [string, number]),
  ];
  const busy: string[] = [];
  for (const [role, port] of planned) if (!(await canBind(port))) busy.push(`${port} (${role})`);
  if (busy.length > 0) {
    process.stderr.write(`stack: refusing to start: port(s) already in use on 127.0.0.1: ${busy.join(', ')}\n`);
    process.exit(1);
  }
  let stack: EppStack | undefined;
  let stopping = false;
  const shutdown = async (why: string, code: number) => {
    if (stopping) return;
    stopping = true;
    say(`${why}: stopping every child by PID`);
    await stack?.stop();
    process.exit(code);
  };
  process.on('SIGINT', () => void shutdown('SIGINT', 0));
  process.on('SIGTERM', () => void shutdown('SIGTERM', 0));
  try {
    stack = await startEppStack({ dir, ports, eppBin: bins.epp, simBin: bins.sim, asyncBin: bins.async, say });
  } catch (err) {
    process.stderr.write(`stack: start-up failed: ${(err as Error).message}\n`);
    process.exit(1);
  }
  void stack.firstExit.then((name) => shutdown(`${name} exited unexpectedly (see ${dir})`, 1));
  const chat = JSON.stringify({ model: EPP_STACK_MODEL, messages: [{ role: 'user', content: 'Hello from the stack' }] });
  process.stdout.write(`
epd-coordinator + llm-d EPP (file discovery) is up; workers: ${bins.sim ? 'llm-d-inference-sim' : 'our sim/'}.
  Files: ${stack.endpointsPath}
         ${stack.eppConfigPath}
         ${stack.envoyConfigPath}
  Try:
    curl -sS ${stack.publicUrl}/v1/chat/completions -H 'content-type: application/json' -d '${chat}'
  Readiness: curl -s ${stack.adminUrl}/ready; curl -s ${stack.eppMetricsUrl} | grep llm_d_epp_ready_endpoints
  Access log (upstream= is the EPP's pick): tail -f ${stack.accessLogPath}
  PIDs: ${stack.pids.map((p) => `${p.name}=${p.pid}`).join(' ')}
  Ctrl-C (or SIGTERM) stops everything.
`);
}
