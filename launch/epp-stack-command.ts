/** `npm run stack -- --epp BIN`: the loopback EPP stack (launch/epp-stack.ts) in the foreground. */
import { canBind } from './ports';
import { join } from 'node:path';
import { REPO_ROOT } from './envoy-bootstrap';
import { startEppStack, type EppStack } from './epp-stack';
import { EPP_STACK_MODEL, EPP_STACK_PORTS, type EppStackPorts } from './epp-stack-plan';

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
