/**
 * `npm run bench -- workers`: what `server.workers: 2` buys over one process (issue 20 item 4).
 *
 * Three stacks run side by side (simulators, the built coordinator, Envoy), identical but for the
 * coordinator's `server.workers` and the Envoy cluster's streams-per-connection cap that makes Envoy
 * open enough connections (launch/envoy-policy.ts): `w1` one process, uncapped (today's default);
 * `w1cap` one process behind the capped cluster (what the cap alone costs); `w2` two workers, capped.
 * Interleaved rounds: in every
 * round each concurrency runs a block on both stacks, alternating which goes first. Per block:
 * requests/s, p50/p99, the service's CPU per request (primary and workers, from /proc), its total
 * RSS, Envoy's open connections to it (`cluster.epd_coordinator.upstream_cx_active`) and the load
 * average (the machine is shared). Writes bench/results/workers.json.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from '../launch/envoy-bootstrap';
import { buildService, freeStackPorts, startLocalStack, type LocalStack } from '../launch/local-stack';
import { ensureEnvoy, httpGet } from '../launch/envoy';
import { TestClient } from '../launch/client';
import { parseBenchArgs } from './args';
import { cpuSeconds, rssMb } from './compare/procs';
import { machineDescription, round3, summarize } from './stats';

const INTS = {
  requests: { flag: 'requests', default: 600, min: 1, max: 100_000, note: 'per block' },
  rounds: { flag: 'rounds', default: 3, min: 1, max: 50 },
  warmup: { flag: 'warmup', default: 300, min: 0, max: 10_000 },
} as const;
const CONCURRENCIES = [8, 32] as const;
const ARMS = [
  { name: 'w1', workers: 1, envoyWorkers: 1 },
  { name: 'w1cap', workers: 1, envoyWorkers: 2 },
  { name: 'w2', workers: 2, envoyWorkers: 2 },
] as const;
type ArmName = (typeof ARMS)[number]['name'];
const BODY = JSON.stringify({
  model: 'sim-model',
  messages: [{ role: 'user', content: 'Two sentences on disaggregated serving.' }],
  max_tokens: 64,
});

interface Arm {
  readonly name: ArmName;
  readonly workers: number;
  readonly stack: LocalStack;
  readonly client: TestClient;
  readonly primary: number;
}

interface Block {
  round: number;
  concurrency: number;
  arm: ArmName;
  rps: number;
  p50: number;
  p99: number;
  cpuMsPerRequest: number;
  rssMb: number;
  /** The cluster primary's own share of `rssMb` (0 for one process). */
  primaryRssMb: number;
  upstreamCxActive: number;
  loadavg1: number;
  errors: number;
}

/** The service's processes: the primary (or the single process) and its forked workers. */
function servicePids(primary: number): number[] {
  const children = readFileSync(`/proc/${primary}/task/${primary}/children`, 'utf8').trim();
  return [primary, ...(children === '' ? [] : children.split(/\s+/).map(Number))];
}
const serviceCpu = (primary: number) => servicePids(primary).reduce((s, p) => s + cpuSeconds(p), 0);
const serviceRss = (primary: number) => round3(servicePids(primary).reduce((s, p) => s + rssMb(p), 0));

async function upstreamCxActive(adminUrl: string): Promise<number> {
  const res = await httpGet(`${adminUrl}/stats?filter=^cluster\\.epd_coordinator\\.upstream_cx_active$`, 2000);
  return Number(/upstream_cx_active: (\d+)/.exec(res.body)?.[1] ?? NaN);
}

async function block(arm: Arm, requests: number, concurrency: number, round: number): Promise<Block> {
  const latencies: number[] = [];
  let errors = 0;
  let issued = 0;
  const cpu0 = serviceCpu(arm.primary);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (issued < requests) {
        issued++;
        const s = performance.now();
        const res = await arm.client.post('/v1/chat/completions', BODY, { timeoutMs: 30_000 }).catch(() => undefined);
        latencies.push(performance.now() - s);
        if (res?.status !== 200) errors++;
      }
    }),
  );
  const wallMs = performance.now() - t0;
  const cpu = serviceCpu(arm.primary) - cpu0;
  const lat = summarize(latencies);
  return {
    round,
    concurrency,
    arm: arm.name,
    rps: round3((requests * 1000) / wallMs),
    p50: lat.p50,
    p99: lat.p99,
    cpuMsPerRequest: round3((cpu * 1000) / requests),
    rssMb: serviceRss(arm.primary),
    primaryRssMb: arm.workers > 1 ? rssMb(arm.primary) : 0,
    upstreamCxActive: await upstreamCxActive(arm.stack.adminUrl),
    loadavg1: round3(loadavg()[0]!),
    errors,
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const args = parseBenchArgs(process.argv.slice(2), 'workers', join(REPO_ROOT, 'bench', 'results', 'workers.json'), INTS);
  const say = (msg: string) => process.stdout.write(`bench: ${msg}\n`);
  // Two stacks' children each watch process exit.
  process.setMaxListeners(40);
  ensureEnvoy();
  buildService(say);
  const arms: Arm[] = [];
  const stopAll = () => Promise.all(arms.map(async (a) => (await a.client.close(), await a.stack.stop())));
  process.once('SIGINT', () => void stopAll().then(() => process.exit(130)));
  try {
    for (const { name, workers, envoyWorkers } of ARMS) {
      const dir = join(REPO_ROOT, '.cache', `bench-workers-${name}`);
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir, { recursive: true });
      const stack = await startLocalStack({
        dir,
        ports: await freeStackPorts(),
        bodyMode: args.bodyMode,
        kvConnector: 'kv-shared-storage',
        builtService: true,
        cpuProfileDir: args.cpuProfileDir,
        serviceWorkers: workers,
        envoyServiceWorkers: envoyWorkers,
        say,
      });
      const primary = stack.pids.find((p) => p.name === 'epd-coordinator')!.pid;
      arms.push({ name, workers, stack, client: new TestClient(stack.publicUrl), primary });
    }
    say(`warm-up: ${args.warmup} requests per stack at concurrency 32`);
    for (const arm of arms) await block(arm, args.warmup, 32, 0);
    const rssAfterWarmup = Object.fromEntries(arms.map((a) => [a.name, serviceRss(a.primary)]));

    const blocks: Block[] = [];
    for (let round = 1; round <= args.rounds; round++) {
      for (const concurrency of CONCURRENCIES) {
        const order = round % 2 === 1 ? arms : [...arms].reverse();
        for (const arm of order) {
          const b = await block(arm, args.requests, concurrency, round);
          blocks.push(b);
          say(
            `round ${round} c=${concurrency} ${b.arm}: ${b.rps} req/s, p50 ${b.p50} ms, p99 ${b.p99} ms, ` +
              `${b.cpuMsPerRequest} ms CPU/req, RSS ${b.rssMb} MB, Envoy cx ${b.upstreamCxActive}, load ${b.loadavg1}, errors ${b.errors}`,
          );
        }
      }
    }

    const keys = ['rps', 'p50', 'p99', 'cpuMsPerRequest', 'rssMb', 'upstreamCxActive'] as const;
    const summary = CONCURRENCIES.flatMap((concurrency) => {
      const of = (arm: ArmName, k: (typeof keys)[number]) =>
        median(blocks.filter((b) => b.concurrency === concurrency && b.arm === arm).map((b) => b[k]));
      return keys.map((k) => ({
        concurrency,
        figure: k,
        w1: of('w1', k),
        w1cap: of('w1cap', k),
        w2: of('w2', k),
        'w2/w1': round3(of('w2', k) / of('w1', k)),
        'w1cap/w1': round3(of('w1cap', k) / of('w1', k)),
      }));
    });
    console.table(summary);
    const result = {
      suite: 'workers',
      machine: machineDescription([`loadavg at end ${loadavg().map(round3).join(' ')}`]),
      note: 'medians over rounds; w1 = one process, uncapped Envoy cluster; w1cap = one process, capped cluster; w2 = server.workers 2, capped; CPU and RSS are the primary plus its workers',
      requestsPerBlock: args.requests,
      rounds: args.rounds,
      rssAfterWarmupMb: rssAfterWarmup,
      summary,
      blocks,
    };
    mkdirSync(join(args.out, '..'), { recursive: true });
    writeFileSync(args.out, `${JSON.stringify(result, null, 2)}\n`);
    say(`wrote ${args.out}`);
    if (blocks.some((b) => b.errors > 0)) process.exitCode = 1;
  } finally {
    await stopAll();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench workers: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
