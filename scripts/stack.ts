/**
 * `npm run stack [-- --buffered] [-- --kv-connector kv-nixl]`: the whole product on loopback with
 * the loopback port plan of launch/local-stack.ts, until Ctrl-C / SIGTERM.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runEppStackCommand } from '../launch/epp-stack-command';
import { ensureEnvoy } from '../launch/envoy';
import { TestClient } from '../launch/client';
import { REPO_ROOT, type EnvoyBodyMode } from '../launch/envoy-bootstrap';
import { checkPortsFree, PortsBusyError, startLocalStack, STACK_IMAGE_REQUEST, STACK_PORTS, type LocalStack } from '../launch/local-stack';

const KV_CONNECTORS = ['kv-shared-storage', 'kv-nixl', 'kv-sglang'];
const USAGE = `usage: npm run stack [-- --buffered] [-- --kv-connector ${KV_CONNECTORS.join('|')}] [-- --inter-token-latency-ms N]
       [-- --no-conditional-decode]
       npm run stack -- --epp BIN [--sim BIN] [--async BIN]   (the real llm-d EPP: docs/deploy-without-kubernetes.md)`;

interface Args {
  bodyMode: EnvoyBodyMode;
  kvConnector: string;
  simArgs: string[];
  conditionalDecode: boolean;
  /** Real peers for the no-Kubernetes topology (launch/epp-stack.ts). */
  peers?: { epp?: string; sim?: string; async?: string };
}

function parseArgs(argv: string[]): Args {
  const args: Args = { bodyMode: 'full_duplex', kvConnector: 'kv-shared-storage', simArgs: [], conditionalDecode: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--buffered') args.bodyMode = 'buffered';
    else if (a === '--full-duplex') args.bodyMode = 'full_duplex';
    else if (a === '--no-conditional-decode') args.conditionalDecode = false;
    else if ((a === '--epp' || a === '--sim' || a === '--async') && argv[i + 1]) args.peers = { ...args.peers, [a.slice(2)]: argv[++i]! };
    else if (a === '--kv-connector' && KV_CONNECTORS.includes(argv[i + 1] ?? '')) args.kvConnector = argv[++i]!;
    else if (a === '--inter-token-latency-ms' && /^\d{1,6}$/.test(argv[i + 1] ?? '')) args.simArgs.push(a, argv[++i]!);
    else if (a === '-h' || a === '--help') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else {
      process.stderr.write(`stack: unexpected argument ${JSON.stringify(a)}\n${USAGE}\n`);
      process.exit(2);
    }
  }
  return args;
}

const DIR = join(REPO_ROOT, '.stack');
const PIDS = join(DIR, 'pids.json');

function previousPids(): string {
  if (!existsSync(PIDS)) return '';
  try {
    const list = JSON.parse(readFileSync(PIDS, 'utf8')) as Array<{ name: string; pid: number }>;
    const alive = list.filter((p) => {
      try {
        process.kill(p.pid, 0);
        return true;
      } catch {
        return false;
      }
    });
    if (alive.length === 0) return '';
    return `\nAn earlier stack may still be running (${alive.map((p) => `${p.name} ${p.pid}`).join(', ')}); stop it with: kill ${alive.map((p) => p.pid).join(' ')}`;
  } catch {
    return '';
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.peers) {
    if (!args.peers.epp) throw new Error('--sim and --async need --epp');
    return runEppStackCommand({ ...args.peers, epp: args.peers.epp });
  }
  const say = (msg: string) => process.stdout.write(`stack: ${msg}\n`);

  try {
    await checkPortsFree(STACK_PORTS);
  } catch (err) {
    if (err instanceof PortsBusyError) {
      process.stderr.write(`stack: refusing to start: ${err.message}${previousPids()}\n`);
      process.exit(1);
    }
    throw err;
  }

  say(`envoy binary ${ensureEnvoy()}`);
  // Each run starts from a clean directory: configs and logs are this run's.
  rmSync(DIR, { recursive: true, force: true });
  mkdirSync(DIR, { recursive: true });

  let stack: LocalStack | undefined;
  let stopping = false;
  const shutdown = async (why: string, code: number) => {
    if (stopping) return;
    stopping = true;
    say(`${why}: stopping every child by PID`);
    await stack?.stop();
    rmSync(PIDS, { force: true });
    say('stopped');
    process.exit(code);
  };
  process.on('SIGINT', () => void shutdown('SIGINT', 0));
  process.on('SIGTERM', () => void shutdown('SIGTERM', 0));

  try {
    stack = await startLocalStack({
      dir: DIR,
      ports: STACK_PORTS,
      bodyMode: args.bodyMode,
      kvConnector: args.kvConnector,
      simArgs: args.simArgs,
      conditionalDecode: args.conditionalDecode,
      multimodal: true,
      say,
    });
  } catch (err) {
    process.stderr.write(`stack: start-up failed: ${(err as Error).message}\n`);
    process.exit(1);
  }
  writeFileSync(PIDS, JSON.stringify(stack.pids, null, 2));
  void stack.firstExit.then((name) => shutdown(`${name} exited unexpectedly (see ${DIR})`, 1));

  // One request through the whole path, so "ready" means the cascade answers.
  const client = new TestClient(stack.publicUrl);
  const smoke = await client
    .post('/v1/chat/completions', { model: 'sim-model', messages: [{ role: 'user', content: 'smoke test' }] })
    .catch((err: Error) => ({ status: 0, text: err.message }));
  await client.close();
  if (smoke.status !== 200) say(`WARNING: smoke request answered ${smoke.status}: ${smoke.text.slice(0, 300)}`);

  const chat = JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'Hello from the stack' }] });
  const streamed = JSON.stringify({
    model: 'sim-model',
    stream: true,
    messages: [{ role: 'user', content: 'Stream these words back to me' }],
  });
  process.stdout.write(`
epd-coordinator stack is up (${args.bodyMode === 'buffered' ? 'BUFFERED' : 'FULL_DUPLEX_STREAMED'} bodies, ${args.kvConnector}).

  Try:
    curl -sS ${stack.publicUrl}/v1/chat/completions -H 'content-type: application/json' \\
      -d '${chat}'
    curl -sSN ${stack.publicUrl}/v1/chat/completions -H 'content-type: application/json' \\
      -d '${streamed}'

  An image (replace-media-urls -> render -> encode -> prefill -> decode; the access log shows the
  encode leg on the gateway listener, epp_profile "encode"):
    curl -sS ${stack.publicUrl}/v1/chat/completions -H 'content-type: application/json' \\
      -d '${STACK_IMAGE_REQUEST}'

${
  args.conditionalDecode
    ? `  The pipeline probes with conditional-decode first: a prompt's first request is a miss (412 from the
  decode simulator's stand-in for the EPP, then render -> prefill -> decode); the same prompt again is a
  cache hit served by the decode worker alone (path_taken "cache_hit" in the access log).

`
    : ''
}  Queue work through the async broker (Redis on 127.0.0.1:${STACK_PORTS.redis}, a processor dispatching back
  through Envoy):
    curl -sS ${stack.publicUrl}/v1/chat/completions -H 'content-type: application/json' \\
      -H 'X-AP-Mode: enqueue' -H 'x-request-id: job-1' -d '${chat}'      # 202 {"id":"job-1","status":"pending"}
    curl -sS ${stack.publicUrl}/v1/requests/job-1                       # 202 pending, then the model's 200
    curl -sS ${stack.publicUrl}/v1/chat/completions -H 'content-type: application/json' \\
      -H 'X-AP-Mode: wait' -d '${chat}'                                 # held until the result lands

  Metrics: curl -sS http://127.0.0.1:${STACK_PORTS.metrics}/metrics

  Access log (JSON, one line per request and per side call): ${stack.accessLogPath}
    tail -f ${stack.accessLogPath}
  Logs and configs: ${DIR}/ (coordinator.yaml, coordinator.log, sim-*.log, envoy/)
  PIDs: ${stack.pids.map((p) => `${p.name}=${p.pid}`).join(' ')}

  Ctrl-C (or SIGTERM) stops everything.
`);
}

void main();
