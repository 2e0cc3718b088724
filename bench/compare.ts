/**
 * `npm run bench -- compare` (needs PEERS_BIN): our service against the Go coordinator, with Envoy
 * alone as the floor, on the same `llm-d-inference-sim` workers and the same Envoy, in two
 * topologies (bench/compare/stack.ts):
 * - `deploy` (compare/deploy-stack.ts): as users deploy both, the llm-d EPP on the gateway
 *   listener, the Go coordinator behind an Envoy listener of its own (the same front door);
 * - `direct` (compare/direct-stack.ts): the earlier bench, a header-routed gateway without an EPP,
 *   the client straight at Go.
 * Both have a fourth setup, `node`: the bare Node coordinator (compare/bare-coordinator.ts) behind
 * an Envoy of its own (compare/node-floor.ts), the floor of any coordinator written in Node,
 * measured beside ours and Go's in the same rounds (chat cases).
 *
 * Two phases per topology, each on a fresh stack: `fast` (zero simulator latency) and `realistic`
 * (20 ms to the first token, 5 ms per token). Every case runs in interleaved rounds
 * (compare/run.ts). CPU per request is the service's, and the system's (service + Envoy + EPP),
 * from each thread's schedstat; memory is RSS after warm-up and after every case, plus our V8 heap.
 *
 * `--topology deploy|direct|both` (both), `--own-sims` (our sim/ workers; direct only),
 * `--service-node PATH`, `--node-flags "FLAGS"` (node flags for our service), `--chart-only`
 * (redraw the SVG from the JSON). Writes bench/results/compare.json and compare.svg.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from '../launch/envoy-bootstrap';
import { buildService } from '../launch/local-stack';
import { ensureEnvoy } from '../launch/envoy';
import { SHIPPED_NODE_FLAGS } from '../launch/service-node-flags';
import { parseBenchArgs } from './args';
import { machineDescription } from './stats';
import { renderCompareChart, type ChartInput } from './compare/chart';
import { startDeployStack } from './compare/deploy-stack';
import { startDirectStack } from './compare/direct-stack';
import { markdownTable } from './compare/report';
import { runPhase, type PhaseResult } from './compare/run';
import type { CompareStack, Phase, StackArgs, Topology } from './compare/stack';
import { MAX_TOKENS, phaseCases, PROMPT } from './compare/workload';

const INTS = {
  rounds: { flag: 'rounds', default: 3, min: 1, max: 100 },
  // 1,200 a block: at 300, a c8 block lasted one to two seconds, and two runs of builds that an
  // 8-round A/B put 5 % apart gave ours ÷ Go at deploy c1 of 1.10 and 1.39 (runs D and E).
  fastRequests: { flag: 'fast-requests', default: 1200, min: 0, max: 100_000, note: 'zero latency, c8 and c32 (c1: a quarter); 0 = skip' },
  largeRequests: { flag: 'large-requests', default: 2, min: 0, max: 100, note: '20 MB generate, per setup and round; 0 = skip' },
  // 20 a block: at 6 (18 requests a setup), one collection or a batch of expiring connections in
  // our service moved its concurrency-1 realistic figure by a third (README, eleventh round).
  c1Requests: { flag: 'c1-requests', default: 20, min: 0, max: 10_000, note: 'realistic, concurrency 1; 0 = skip' },
  c8Requests: { flag: 'c8-requests', default: 48, min: 0, max: 100_000, note: 'realistic, concurrency 8; 0 = skip' },
  c32Requests: { flag: 'c32-requests', default: 128, min: 0, max: 100_000, note: 'realistic, concurrency 32; 0 = skip' },
  streaming: { flag: 'streaming', default: 1, min: 0, max: 1, note: 'the streaming cases at c1/c8/c32; 0 = skip' },
  idleSeconds: { flag: 'idle-seconds', default: 10, min: 0, max: 600, note: 'idle CPU of each service; 0 = skip' },
  // 15,000: V8 marks a burst of our functions for TurboFan between requests 10,000 and 12,000
  // (77 and 20 in those thousands, at most 5 in any thousand after), so a 10,000 warm-up left
  // that burst in the concurrency-1 rounds (README, Performance, fifteenth round).
  warmup: { flag: 'warmup', default: 15_000, min: 0, max: 100_000, note: 'requests per setup before a phase is measured (JIT, pools)' },
} as const;

const USAGE =
  'compare: [--topology deploy|direct|both] [--own-sims] [--service-node PATH] [--node-flags "FLAGS"] [--service-env NAME=VALUE ...] [--chart-only]\n';

function parseArgs(argv: readonly string[]) {
  const extra = {
    ownSims: false,
    serviceNode: process.execPath,
    // As scripts/start.sh, the Dockerfile and the chart run it; `--node-flags ''` for V8's defaults.
    serviceNodeFlags: [...SHIPPED_NODE_FLAGS] as string[],
    serviceEnv: {} as Record<string, string>,
    topologies: ['deploy', 'direct'] as Topology[],
    chartOnly: false,
  };
  const rest: string[] = [];
  const value = (flag: string, v: string | undefined): string => {
    if (v === undefined) throw new Error(`${flag} needs a value\n${USAGE}`);
    return v;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--own-sims') extra.ownSims = true;
    else if (a === '--chart-only') extra.chartOnly = true;
    else if (a === '--service-node') extra.serviceNode = value(a, argv[++i]);
    else if (a === '--node-flags') extra.serviceNodeFlags = value(a, argv[++i]).split(/\s+/).filter(Boolean);
    else if (a === '--service-env') {
      const kv = value(a, argv[++i]);
      const eq = kv.indexOf('=');
      if (eq <= 0) throw new Error(`--service-env: expected NAME=VALUE\n${USAGE}`);
      extra.serviceEnv[kv.slice(0, eq)] = kv.slice(eq + 1);
    } else if (a === '--topology') {
      const t = value(a, argv[++i]);
      if (t !== 'deploy' && t !== 'direct' && t !== 'both') throw new Error(`--topology: deploy, direct or both\n${USAGE}`);
      extra.topologies = t === 'both' ? ['deploy', 'direct'] : [t];
    } else rest.push(a);
  }
  if (rest.includes('--help') || rest.includes('-h')) process.stdout.write(USAGE);
  return { ...parseBenchArgs(rest, 'compare', join(REPO_ROOT, 'bench', 'results', 'compare.json'), INTS), ...extra };
}
type Args = ReturnType<typeof parseArgs>;

function peerCommits(): Record<string, string> {
  // `<name> <commit>` lines, if whoever built the peers left them there.
  const f = join(process.env['PEERS_BIN'] ?? '', 'VERSIONS');
  const out: Record<string, string> = {};
  if (existsSync(f))
    for (const line of readFileSync(f, 'utf8').split('\n')) {
      const m = /^(\S+)[\s=:]+(\S+)/.exec(line);
      if (m) out[m[1]!] = m[2]!;
    }
  return out;
}

function checkPeers(args: Args): void {
  const peers = process.env['PEERS_BIN'];
  if (!peers) {
    process.stderr.write('bench compare: needs PEERS_BIN, a folder with the prebuilt `coordinator`, `epp` and `llm-d-inference-sim`\n');
    process.exit(2);
  }
  const need = [
    'coordinator',
    ...(args.topologies.includes('deploy') ? ['epp', 'llm-d-inference-sim'] : []),
    ...(args.ownSims ? [] : ['llm-d-inference-sim']),
  ];
  const missing = [...new Set(need)].filter((b) => !existsSync(join(peers, b)));
  if (missing.length > 0) {
    process.stderr.write(`bench compare: PEERS_BIN=${peers} has no ${missing.join(', ')}\n`);
    process.exit(2);
  }
}

async function runTopology(topology: Topology, args: Args, say: (m: string) => void): Promise<Partial<Record<Phase, PhaseResult>>> {
  const stackArgs: StackArgs = {
    serviceNode: args.serviceNode,
    serviceNodeFlags: args.serviceNodeFlags,
    serviceEnv: args.serviceEnv,
    cpuProfileDir: args.cpuProfileDir,
    ownSims: args.ownSims,
  };
  const out: Partial<Record<Phase, PhaseResult>> = {};
  for (const phase of ['fast', 'realistic'] as const) {
    const start = (): Promise<CompareStack> =>
      topology === 'deploy'
        ? startDeployStack(phase, stackArgs, say)
        : startDirectStack(phase, { ...stackArgs, bodyMode: args.bodyMode }, say);
    const model = topology === 'deploy' ? 'Qwen/Qwen3-VL-2B-Instruct' : 'sim-model';
    const cases = phaseCases(phase, model, {
      fast: args.fastRequests,
      large: args.largeRequests,
      c1: args.c1Requests,
      c8: args.c8Requests,
      c32: args.c32Requests,
      streaming: args.streaming === 1,
    });
    if (cases.length === 0) continue;
    const stack = await start();
    try {
      if (stack.model !== model) throw new Error(`${topology}: the stack serves ${stack.model}, the cases ask for ${model}`);
      out[phase] = await runPhase(stack, cases, {
        rounds: args.rounds,
        warmup: args.warmup,
        // Realistic requests take about a second: 256 at a time keep 15,000 of them to about a minute a setup.
        warmupConcurrency: phase === 'fast' ? 64 : 256,
        idleSeconds: args.idleSeconds,
        label: `${topology}/${phase}`,
        say,
      });
    } finally {
      await stack.stop();
    }
  }
  return out;
}

function chartInputs(doc: { topologies: Record<string, Partial<Record<Phase, PhaseResult>>> }): ChartInput[] {
  return Object.entries(doc.topologies).map(([topology, phases]) => ({ topology, phases }));
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  process.setMaxListeners(32); // every child adds an exit hook (launch/supervise.ts)
  const say = (msg: string) => process.stdout.write(`bench: ${msg}\n`);
  const svgPath = args.out.replace(/\.json$/, '') + '.svg';
  if (args.chartOnly) {
    const doc = JSON.parse(readFileSync(args.out, 'utf8')) as {
      date: string;
      machine: string;
      topologies: Record<string, Partial<Record<Phase, PhaseResult>>>;
    };
    writeFileSync(svgPath, renderCompareChart(chartInputs(doc), `${doc.date}; ${doc.machine}`));
    say(`wrote ${svgPath}`);
    return;
  }
  checkPeers(args);
  ensureEnvoy();
  buildService(say);
  const started = new Date().toISOString();
  const loadStart = loadavg().map((l) => Math.round(l * 100) / 100);
  const topologies: Partial<Record<Topology, Partial<Record<Phase, PhaseResult>>>> = {};
  for (const t of args.topologies) topologies[t] = await runTopology(t, args, say);
  const doc = {
    suite: 'compare',
    date: started,
    machine: machineDescription([
      'envoy 1.40.0 (--concurrency 1)',
      'shared with other jobs: latency and req/s are noisy, CPU per request is the robust figure',
    ]),
    load_average: { start: loadStart, end: loadavg().map((l) => Math.round(l * 100) / 100) },
    service_node: execFileSync(args.serviceNode, ['--version'], { encoding: 'utf8' }).trim(),
    service_node_flags: args.serviceNodeFlags,
    service_env: args.serviceEnv,
    workers: 'llm-d-inference-sim (PEERS_BIN), GOMAXPROCS=1, --force-dummy-tokenizer, --max-num-seqs=1000',
    peer_commits: peerCommits(),
    setup: {
      body_mode: args.bodyMode,
      rounds: args.rounds,
      warmup: args.warmup,
      deploy: {
        floor: 'client -> Envoy gateway listener (epp-profile: decode) -> EPP -> decode worker',
        ours: 'client -> Envoy public listener -> epd-coordinator ext_proc -> EPP -> decode worker; side calls via the gateway listener (EPP)',
        go: 'client -> Envoy go listener -> Go coordinator -> Envoy gateway listener (EPP) -> workers; it copies the answer',
        node: 'client -> a second Envoy (the same production config) public listener -> bare Node coordinator ext_proc -> the same EPP -> decode worker; prefill via that Envoy gateway listener (EPP); chat cases only',
        pipeline: 'replace-media-urls, render, encode, prefill, decode; kv-nixl, ec-nixl; both at log level 2',
      },
      direct: {
        floor: 'client -> Envoy gateway listener (epp-profile: decode) -> decode worker (no EPP)',
        ours: 'client -> Envoy public listener -> epd-coordinator ext_proc -> decode worker',
        go: 'client -> Go coordinator -> Envoy gateway listener -> workers; no Envoy in front of it',
        node: 'client -> a second Envoy public listener -> bare Node coordinator (bench/compare/bare-coordinator.ts: hand-framed ext_proc on node:http2, undici side calls, the same legs, nothing else) -> decode worker; chat cases only',
        pipeline: 'render, prefill, decode; kv-nixl; both at log level 2',
      },
      request: `chat: ${Buffer.byteLength(PROMPT)}-byte prompt, max_tokens ${MAX_TOKENS}, echo decode worker; generate: 20 MB token-ids body`,
      fast: 'zero simulator latency',
      realistic: '20 ms to the first token, 5 ms per token (decode and prefill workers)',
      cpu: 'sum of /proc/<pid>/task/*/schedstat run time over the blocks of each setup, divided by its requests; system = service + Envoy + EPP',
      memory: 'VmRSS of each service; our V8 heap from its /metrics; after warm-up and after each case',
    },
    topologies,
  };
  mkdirSync(join(args.out, '..'), { recursive: true });
  writeFileSync(args.out, `${JSON.stringify(doc, null, 2)}\n`);
  say(`wrote ${args.out}`);
  writeFileSync(svgPath, renderCompareChart(chartInputs(doc as never), `${started}; load ${loadStart.join(' ')}; ${doc.machine}`));
  say(`wrote ${svgPath}`);
  for (const [t, phases] of Object.entries(topologies)) process.stdout.write(`\n${markdownTable(t, Object.values(phases))}\n`);
  const errors = Object.values(topologies)
    .flatMap((p) => Object.values(p))
    .flatMap((p) => Object.values(p.cases))
    .flatMap((c) => Object.values(c))
    .reduce((a, r) => a + r.errors, 0);
  if (errors > 0) throw new Error(`${errors} request(s) failed (see the lines above)`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
