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
import { ensureEnvoy } from './envoy';
import { isListening, waitUntil } from './ports';
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
import type { ProxyListener } from './topology-envoy';
import {
  eppArgv,
  eppStackCoordinatorConfig,
  eppStackEnvoyArgv,
  llmdAsyncArgv,
  simArgv,
  writeKubeconfig,
  type EppStackPorts,
} from './epp-stack-plan';

export { EPP_STACK_MODEL, EPP_STACK_PORTS, eppStackCoordinatorConfig, freeEppStackPorts, type EppStackPorts } from './epp-stack-plan';

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
  /** `--log-http` on every worker (the real-peer suite reads it). Default true. */
  readonly simLogHttp?: boolean;
  /**
   * How epd-coordinator runs, given its config file. Default: the TypeScript sources through tsx.
   * The compare bench runs the built `dist/` on plain node, as it ships.
   */
  readonly serviceCommand?: (configPath: string) => { command: string; args: string[]; env?: NodeJS.ProcessEnv };
  /** Plain Envoy listeners in front of another service (topology-envoy.ts). Default none. */
  readonly proxyListeners?: readonly ProxyListener[];
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
        ? { command: opts.simBin, args: simArgv(w.role, w.port, opts.simArgs ?? [], opts.simLogHttp ?? true), env }
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
        // Free ports picked up front may race with another stack: a clash must fail, not share.
        reusePort: false,
        ...(ports.asyncEntry ? { asyncPort: ports.asyncEntry } : {}),
        ...(opts.proxyListeners ? { proxyListeners: opts.proxyListeners } : {}),
      },
    });

    const epp = await start('epp', {
      command: opts.eppBin,
      args: eppArgv(ports, files.eppConfigPath),
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
        ...(opts.serviceCommand ? opts.serviceCommand(coordinatorConfigPath) : tsx('src/main.ts', ['--config', coordinatorConfigPath])),
        ready: /"msg":"epd-coordinator listening"/,
      });
      say(`epd-coordinator on 127.0.0.1:${ports.extProc} (config ${coordinatorConfigPath})`);
      return c;
    };
    coordinator = await startCoordinator();

    envoy = await start('envoy', {
      command: ensureEnvoy(),
      args: eppStackEnvoyArgv(files.envoyConfigPath),
      ready: /starting main dispatch loop/,
    });
    say(`envoy on 127.0.0.1:${ports.public} (gateway ${ports.gateway}, admin ${ports.admin})`);

    if (opts.asyncBin && ports.redis) {
      const kubeconfig = writeKubeconfig(dir);
      const ap = await start('llm-d-async', {
        command: opts.asyncBin,
        args: llmdAsyncArgv(ports),
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
