/**
 * A real Envoy from the shipped bootstrap with an edit applied: the fault and failover tests need
 * topologies the template does not render (two prefill endpoints, an EPP-like reserve answer).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderEnvoyBootstrap, type EnvoyBootstrapOptions } from '../../../launch/envoy-bootstrap';
import { ensureEnvoy, httpGet } from '../../../launch/envoy';
import { sleep } from '../../../launch/ports';

export interface CustomEnvoy {
  readonly pid: number;
  readonly adminUrl: string;
  readonly publicUrl: string;
  readonly publicPort: number;
  readonly accessLogPath: string;
  stats(filter: string): Promise<Record<string, number>>;
  stop(): Promise<void>;
}

/** Replaces the single endpoint of `cluster` with all of `addresses` (`ip:port`). */
export function withClusterEndpoints(yaml: string, cluster: string, addresses: readonly string[]): string {
  const start = yaml.indexOf(`  - name: ${cluster}\n`);
  if (start < 0) throw new Error(`cluster ${cluster} not in the bootstrap`);
  const from = yaml.indexOf('      - lb_endpoints:\n', start);
  const next = yaml.indexOf('\n  - name: ', start + 1);
  const end = next < 0 ? yaml.length : next + 1;
  const endpoints = addresses
    .map((a) => {
      const [host, port] = a.split(':');
      return `        - endpoint:\n            address:\n              socket_address: { address: ${host}, port_value: ${port} }\n`;
    })
    .join('');
  return yaml.slice(0, from) + '      - lb_endpoints:\n' + endpoints + yaml.slice(end);
}

/** Inserts routes (YAML list items at the gateway route indentation) before the gateway's first route. */
export function withGatewayRoutes(yaml: string, routes: string): string {
  const anchor = "              # Side-call timeouts are the coordinator's (gateway.timeout, step timeouts).\n              routes:\n";
  if (!yaml.includes(anchor)) throw new Error('gateway routes not found in the bootstrap');
  return yaml.replace(anchor, anchor + routes);
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

export async function startCustomEnvoy(
  dir: string,
  bootstrap: Partial<EnvoyBootstrapOptions>,
  edit: (yaml: string) => string,
): Promise<CustomEnvoy> {
  mkdirSync(dir, { recursive: true });
  const accessLogPath = join(dir, 'access.log');
  const configPath = join(dir, 'envoy.yaml');
  const adminAddressPath = join(dir, 'admin-address');
  const logPath = join(dir, 'envoy.log');
  writeFileSync(
    configPath,
    edit(renderEnvoyBootstrap({ publicPort: 0, adminPort: 0, asyncPort: 0, reusePort: false, ...bootstrap, accessLogPath })),
  );
  writeFileSync(adminAddressPath, '');
  const errFd = openSync(join(dir, 'envoy.stderr'), 'w');
  const child = spawn(
    ensureEnvoy(),
    [
      '-c',
      configPath,
      '--concurrency',
      '1',
      '--disable-hot-restart',
      '--log-level',
      'warn',
      '--log-path',
      logPath,
      '--file-flush-interval-msec',
      '50',
      '--admin-address-path',
      adminAddressPath,
      '--drain-time-s',
      '1',
      '--drain-strategy',
      'immediate',
    ],
    { stdio: ['ignore', errFd, errFd] },
  );
  closeSync(errFd);
  live.add(child);
  let exited = false;
  const exit = new Promise<void>((resolve) =>
    child.once('exit', () => {
      exited = true;
      live.delete(child);
      resolve();
    }),
  );
  const stop = async (): Promise<void> => {
    if (exited) return;
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 3000);
    await exit;
    clearTimeout(t);
  };

  const deadline = Date.now() + 20_000;
  let adminUrl = '';
  let publicPort = 0;
  try {
    while (publicPort === 0) {
      if (exited)
        throw new Error(`envoy exited during start-up:\n${existsSync(logPath) ? readFileSync(logPath, 'utf8').slice(-3000) : ''}`);
      if (Date.now() > deadline) throw new Error('envoy not ready in time');
      if (!adminUrl) {
        const addr = readFileSync(adminAddressPath, 'utf8').trim();
        if (addr) adminUrl = `http://${addr}`;
      }
      if (adminUrl) {
        try {
          const ready = await httpGet(`${adminUrl}/ready`, 1000);
          if (ready.status === 200 && ready.body.trim() === 'LIVE') {
            const doc = JSON.parse((await httpGet(`${adminUrl}/listeners?format=json`)).body) as {
              listener_statuses?: Array<{ name: string; local_address?: { socket_address?: { port_value?: number } } }>;
            };
            publicPort = doc.listener_statuses?.find((l) => l.name === 'public')?.local_address?.socket_address?.port_value ?? 0;
          }
        } catch {
          // admin not up yet
        }
      }
      if (publicPort === 0) await sleep(50);
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    pid: child.pid!,
    adminUrl,
    publicPort,
    publicUrl: `http://127.0.0.1:${publicPort}`,
    accessLogPath,
    stats: async (filter) => {
      const res = await httpGet(`${adminUrl}/stats?filter=${encodeURIComponent(filter)}`);
      const out: Record<string, number> = {};
      for (const line of res.body.split('\n')) {
        const m = /^([^:]+): (\d+)$/.exec(line.trim());
        if (m) out[m[1]!] = Number(m[2]);
      }
      return out;
    },
    stop,
  };
}
