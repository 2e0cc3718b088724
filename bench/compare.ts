/**
 * `npm run bench -- compare` (needs PEERS_BIN): our service against the Go coordinator, with plain
 * Envoy as the floor, on the same simulators and the same Envoy.
 *
 * Setups, all on loopback:
 * - floor: client -> Envoy gateway listener (epp-profile: decode) -> decode worker
 * - ours:  client -> Envoy public listener -> epd-coordinator ext_proc (render direct, prefill via the
 *          gateway listener) -> decode worker
 * - go:    client -> upstream Go `coordinator` (render direct, prefill and decode via the gateway
 *          listener; it proxies the decode answer itself). No Envoy in front of it: one hop fewer than
 *          its own e2e topology, so the comparison is, if anything, in its favour.
 * Workers are `llm-d-inference-sim` processes from PEERS_BIN (render, prefill, decode), header-routed
 * by the gateway listener of our Envoy bootstrap (no EPP). Same pipeline on both: render -> prefill ->
 * decode, kv-nixl.
 *
 * Two phases, each on a fresh stack: `fast` (zero simulator latency) and `realistic` (20 ms to the
 * first token, 5 ms per token). Within a phase every case runs in rounds, and in each round every
 * setup runs one block, in rotating order, so that drift on a shared machine falls on all of them.
 * CPU seconds per request come from /proc/<pid>/stat (utime + stime, all threads) of our process, of
 * the Go coordinator, and of Envoy, over the blocks of each setup: the robust figure here. Latency
 * and requests/s on a shared machine are noisy.
 *
 * `--own-sims` runs the repository's sim/ workers instead of llm-d-inference-sim (PEERS_BIN still
 * needs `coordinator`). `--service-node PATH` runs our service on
 * another node binary (Node 24). Writes bench/results/compare.json.
 */
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { REPO_ROOT } from '../launch/envoy-bootstrap';
import { buildService, coordinatorConfig } from '../launch/local-stack';
import { startChild, type Child } from '../launch/supervise';
import { ensureEnvoy, httpGet, startEnvoy, type EnvoyHandle } from '../launch/envoy';
import { freePort } from '../launch/ports';
import { TestClient } from '../launch/client';
import { parseBenchArgs } from './args';
import { machineDescription, round3, summarize, type Summary } from './stats';

type Setup = 'floor' | 'ours' | 'go';
type Phase = 'fast' | 'realistic';

const INTS = {
  rounds: { flag: 'rounds', default: 3, min: 1, max: 100 },
  fastRequests: {
    flag: 'fast-requests',
    default: 300,
    min: 0,
    max: 100_000,
    note: 'per setup and round, non-streaming at concurrency 8; 0 = skip',
  },
  largeRequests: { flag: 'large-requests', default: 2, min: 0, max: 100, note: '20 MB generate, per setup and round; 0 = skip' },
  streamRequests: { flag: 'stream-requests', default: 128, min: 0, max: 100_000, note: 'streaming at concurrency 64, realistic; 0 = skip' },
  c1Requests: { flag: 'c1-requests', default: 6, min: 0, max: 10_000, note: 'realistic, concurrency 1; 0 = skip' },
  c8Requests: { flag: 'c8-requests', default: 48, min: 0, max: 100_000, note: 'realistic, concurrency 8; 0 = skip' },
  c32Requests: { flag: 'c32-requests', default: 128, min: 0, max: 100_000, note: 'realistic, concurrency 32; 0 = skip' },
  idleSeconds: { flag: 'idle-seconds', default: 10, min: 0, max: 600, note: 'idle CPU of each service; 0 = skip' },
  warmup: { flag: 'warmup', default: 1500, min: 0, max: 100_000, note: 'requests per setup before a phase is measured (JIT, pools)' },
} as const;

const MODEL = 'sim-model';
const MAX_TOKENS = 170;
/** About 1 KB of prompt: ~170 words, so an echoing decode worker answers ~170 tokens. */
const PROMPT = Array.from({ length: 170 }, (_, i) => ['alpha', 'beta', 'gamma', 'delta', 'omega'][i % 5]).join(' ');
const chatBody = (stream: boolean): string =>
  JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: MAX_TOKENS,
    ...(stream ? { stream: true } : {}),
  });

const MB = 1_000_000;
/** A generate body of about `bytes` (the shape of bench/large-body.ts): 4096 token ids and one image's kwargs_data. */
function generateBody(bytes: number): string {
  const tokenIds = Array.from({ length: 4096 }, (_, i) => (i === 0 ? 1 : 100 + (i % 30_000)));
  for (let i = 8; i < 8 + 1024; i++) tokenIds[i] = 32000;
  const skeleton = {
    model: MODEL,
    token_ids: tokenIds,
    sampling_params: { max_tokens: 8 },
    features: {
      mm_hashes: { image: ['bench-image-0'] },
      mm_placeholders: { image: [{ offset: 8, length: 1024 }] },
      kwargs_data: { image: [''] },
    },
  };
  const fill = Math.max(0, bytes - JSON.stringify(skeleton).length);
  skeleton.features.kwargs_data.image[0] = Buffer.alloc(Math.ceil((fill * 3) / 4), 0x5a)
    .toString('base64')
    .slice(0, fill);
  return JSON.stringify(skeleton);
}

interface Extra {
  ownSims: boolean;
  serviceNode: string;
}

function parseArgs(argv: readonly string[]) {
  const extra: Extra = { ownSims: false, serviceNode: process.execPath };
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--own-sims') extra.ownSims = true;
    else if (argv[i] === '--service-node') {
      const v = argv[++i];
      if (!v) throw new Error('--service-node needs a path');
      extra.serviceNode = v;
    } else rest.push(argv[i]!);
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(
      'compare: [--own-sims (our sim/ workers instead of llm-d-inference-sim)] [--service-node PATH (node binary for our service)]\n',
    );
  }
  return { ...parseBenchArgs(rest, 'compare', join(REPO_ROOT, 'bench', 'results', 'compare.json'), INTS), ...extra };
}
type Args = ReturnType<typeof parseArgs>;

/** utime + stime of a process (all its threads), seconds. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the parenthesised command name (which may hold spaces): state is field 3.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}
const CLOCK_TICKS = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

async function waitHealthy(url: string, name: string, exited: () => boolean, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (exited()) throw new Error(`${name} exited during start-up`);
    try {
      if ((await httpGet(url, 1000)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${name}: ${url} not healthy after ${timeoutMs} ms`);
}

interface Proc {
  readonly name: string;
  readonly pid: number;
  stop(): Promise<void>;
}

/** A Go peer: output to a log file, ready when `healthUrl` answers 200 (they print no fixed line). */
async function startPolled(
  name: string,
  command: string,
  args: string[],
  logPath: string,
  healthUrl: string,
  env: NodeJS.ProcessEnv = {},
): Promise<Proc> {
  const fd = openSync(logPath, 'a');
  const child = spawn(command, args, { stdio: ['ignore', fd, fd], detached: true, env: { ...process.env, ...env } });
  closeSync(fd);
  let gone = false;
  const exited = new Promise<void>((r) => child.once('exit', () => ((gone = true), r())));
  const kill = () => {
    if (!gone && child.pid) process.kill(child.pid, 'SIGKILL');
  };
  process.once('exit', kill);
  const proc: Proc = {
    name,
    pid: child.pid ?? -1,
    stop: async () => {
      if (gone) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(t);
    },
  };
  try {
    await waitHealthy(healthUrl, name, () => gone);
  } catch (err) {
    await proc.stop();
    throw new Error(`${(err as Error).message}; see ${logPath}`, { cause: err });
  }
  return proc;
}

function childProc(c: Child): Proc {
  return { name: c.name, pid: c.pid, stop: () => c.stop() };
}

interface Stack {
  readonly urls: Record<Setup, string>;
  readonly pids: { ours: number; go?: number; envoy: number };
  stop(): Promise<void>;
}

async function startCompareStack(phase: Phase, args: Args, say: (m: string) => void): Promise<Stack> {
  const dir = join(REPO_ROOT, '.cache', 'bench-compare', phase);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const procs: Proc[] = [];
  let envoy: EnvoyHandle | undefined;
  const stop = async () => {
    await envoy?.stop();
    for (const p of [...procs].reverse()) await p.stop();
  };
  const realistic = phase === 'realistic';
  try {
    const port = {
      render: await freePort(),
      prefill: await freePort(),
      decode: await freePort(),
      extProc: await freePort(),
      go: await freePort(),
    };
    const peers = process.env['PEERS_BIN'] ?? '';
    for (const role of ['render', 'prefill', 'decode'] as const) {
      const name = `sim-${role}-0`;
      if (args.ownSims) {
        const lat = realistic && role !== 'render' ? ['--time-to-first-token-ms', '20', '--inter-token-latency-ms', '5'] : [];
        const c = await startChild({
          name,
          command: process.execPath,
          args: [
            '--import',
            'tsx',
            join(REPO_ROOT, 'sim', 'cli.ts'),
            '--port',
            String(port[role]),
            '--name',
            name,
            '--role',
            role,
            '--mode',
            'echo',
            ...lat,
          ],
          cwd: REPO_ROOT,
          logPath: join(dir, `${name}.log`),
          ready: /^sim \S+ listening on /,
        });
        procs.push(childProc(c));
      } else {
        // One simulator per role: dummy tokenizer (no network), room for 20 MB bodies; no --host
        // flag.
        const lat = realistic && role !== 'render' ? ['--time-to-first-token=20ms', '--inter-token-latency=5ms'] : [];
        const modeArgs = role === 'prefill' ? [] : ['--mode=echo'];
        const simArgs = [
          `--model=${MODEL}`,
          `--port=${port[role]}`,
          '--force-dummy-tokenizer',
          '--max-model-len=131072',
          '--max-request-body-size-mb=64',
          '--max-num-seqs=1000',
          ...modeArgs,
          ...lat,
        ];
        procs.push(
          await startPolled(
            name,
            join(peers, 'llm-d-inference-sim'),
            simArgs,
            join(dir, `${name}.log`),
            `http://127.0.0.1:${port[role]}/health`,
            { GOMAXPROCS: '1', POD_NAME: name },
          ),
        );
      }
      say(`${phase}: ${name} on 127.0.0.1:${port[role]}`);
    }

    // Envoy first (its gateway port is in both coordinators' configs); its ext_proc cluster finds our
    // service once it listens.
    const accessLogPath = join(dir, 'envoy-access.log');
    envoy = await startEnvoy({
      dir: join(dir, 'envoy'),
      logLevel: 'warn',
      detached: true,
      flushIntervalMs: 1000,
      bootstrap: {
        bodyMode: args.bodyMode,
        extProcAddress: `127.0.0.1:${port.extProc}`,
        encodeAddress: `127.0.0.1:${port.prefill}`,
        prefillAddress: `127.0.0.1:${port.prefill}`,
        decodeAddress: `127.0.0.1:${port.decode}`,
        accessLogPath,
      },
    });
    const gateway = envoy.gatewayPort;

    const oursConfig = join(dir, 'coordinator.yaml');
    writeFileSync(
      oursConfig,
      coordinatorConfig({
        ports: {
          public: envoy.publicPort,
          gateway,
          admin: 0,
          async: 0,
          extProc: port.extProc,
          render: port.render,
          encode: port.prefill,
          prefill: port.prefill,
          decode: port.decode,
        },
        kvConnector: 'kv-nixl',
        logLevel: 2,
      }),
    );
    const profile = args.cpuProfileDir ? ['--cpu-prof', `--cpu-prof-dir=${join(args.cpuProfileDir, phase)}`] : [];
    const ours = await startChild({
      name: 'epd-coordinator',
      command: args.serviceNode,
      args: [...profile, join(REPO_ROOT, 'dist', 'src', 'main.js'), '--config', oursConfig],
      cwd: REPO_ROOT,
      logPath: join(dir, 'coordinator.log'),
      ready: /"msg":"epd-coordinator listening"/,
    });
    procs.push(childProc(ours));
    say(`${phase}: epd-coordinator (node ${execFileSync(args.serviceNode, ['--version'], { encoding: 'utf8' }).trim()}) pid ${ours.pid}`);

    let goPid: number | undefined;
    {
      // The upstream e2e coordinatorConfigNIXL, local addresses, default log level.
      const goConfig = join(dir, 'go-coordinator.yaml');
      writeFileSync(
        goConfig,
        yaml.dump({
          log_level: 2,
          server: {
            listen_addr: `127.0.0.1:${port.go}`,
            read_timeout: '30s',
            write_timeout: '120s',
            shutdown_timeout: '1s',
            max_request_body_size: 64,
          },
          gateway: { address: `http://127.0.0.1:${gateway}`, max_idle_conns_per_host: 100, idle_conn_timeout: '90s', timeout: '60s' },
          pipeline: {
            kv_connector: 'kv-nixl',
            ec_connector: 'ec-nixl',
            use_openai_format: true,
            steps: [
              { type: 'render', params: { address: `http://127.0.0.1:${port.render}`, timeout: '60s' } },
              { type: 'prefill' },
              { type: 'decode' },
            ],
          },
        }),
      );
      const go = await startPolled(
        'go-coordinator',
        join(peers, 'coordinator'),
        ['--config', goConfig],
        join(dir, 'go-coordinator.log'),
        `http://127.0.0.1:${port.go}/healthz`,
      );
      procs.push(go);
      goPid = go.pid;
      say(`${phase}: Go coordinator pid ${go.pid} on 127.0.0.1:${port.go}`);
    }
    return {
      urls: { floor: envoy.gatewayUrl, ours: envoy.publicUrl, go: `http://127.0.0.1:${port.go}` },
      pids: { ours: ours.pid, go: goPid, envoy: envoy.pid },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

interface Case {
  readonly name: string;
  readonly phase: Phase;
  readonly path: string;
  readonly body: string;
  readonly stream: boolean;
  readonly concurrency: number;
  readonly requests: number;
  readonly timeoutMs: number;
}

interface Tally {
  samples: number[];
  wallMs: number;
  serviceCpu: number;
  envoyCpu: number;
  errors: number;
  firstError: string;
}

function check(c: Case, status: number, text: string): string {
  if (status !== 200) return `HTTP ${status} ${text.slice(0, 200)}`;
  if (c.stream && !text.trimEnd().endsWith('data: [DONE]')) return `stream without [DONE]: ${text.slice(-200)}`;
  if (!c.stream && !text.startsWith('{')) return `not JSON: ${text.slice(0, 200)}`;
  return '';
}

async function runBlock(c: Case, setup: Setup, stack: Stack, client: TestClient, t: Tally, n: number): Promise<void> {
  const headers = setup === 'floor' ? { 'epp-profile': 'decode' } : undefined;
  const servicePid = setup === 'ours' ? stack.pids.ours : setup === 'go' ? stack.pids.go : undefined;
  const cpu0 = servicePid ? cpuSeconds(servicePid) : 0;
  const env0 = cpuSeconds(stack.pids.envoy);
  const t0 = performance.now();
  let issued = 0;
  const worker = async () => {
    while (issued < n) {
      issued++;
      const s = performance.now();
      let err: string;
      try {
        const res = await client.post(c.path, c.body, { headers, timeoutMs: c.timeoutMs });
        err = check(c, res.status, res.text);
      } catch (e) {
        err = (e as Error).message;
      }
      t.samples.push(performance.now() - s);
      if (err) {
        t.errors++;
        t.firstError ||= `${c.name}/${setup}: ${err}`;
      }
    }
  };
  await Promise.all(Array.from({ length: c.concurrency }, worker));
  t.wallMs += performance.now() - t0;
  if (servicePid) t.serviceCpu += cpuSeconds(servicePid) - cpu0;
  t.envoyCpu += cpuSeconds(stack.pids.envoy) - env0;
}

interface SetupResult extends Summary {
  rps: number;
  service_cpu_ms_per_request: number | null;
  envoy_cpu_ms_per_request: number;
  errors: number;
}

function result(setup: Setup, t: Tally): SetupResult {
  const n = t.samples.length;
  return {
    ...summarize(t.samples),
    rps: round3((n * 1000) / t.wallMs),
    service_cpu_ms_per_request: setup === 'floor' ? null : round3((t.serviceCpu * 1000) / n),
    envoy_cpu_ms_per_request: round3((t.envoyCpu * 1000) / n),
    errors: t.errors,
  };
}

async function idleCpu(stack: Stack, seconds: number): Promise<Record<string, number>> {
  const pids: Record<string, number> = { ours: stack.pids.ours, envoy: stack.pids.envoy, ...(stack.pids.go ? { go: stack.pids.go } : {}) };
  // Let the warm-up's deferred work (concurrent compiles, a GC, idle sockets closing) finish first.
  await new Promise((r) => setTimeout(r, 3000));
  const before = Object.fromEntries(Object.entries(pids).map(([k, p]) => [k, cpuSeconds(p)]));
  await new Promise((r) => setTimeout(r, seconds * 1000));
  return Object.fromEntries(Object.entries(pids).map(([k, p]) => [k, round3(((cpuSeconds(p) - before[k]!) * 1000) / seconds)]));
}

async function runPhase(phase: Phase, cases: Case[], setups: Setup[], args: Args, say: (m: string) => void) {
  if (cases.length === 0) return { cases: {}, idle_cpu_ms_per_s: null };
  const stack = await startCompareStack(phase, args, say);
  const client = new TestClient('');
  const out: Record<string, Record<string, SetupResult>> = {};
  let idle: Record<string, number> | null = null;
  try {
    // Warm-up until V8 has compiled the hot path (a few hundred functions, seconds of TurboFan work
    // that would otherwise be billed to the first measured requests): non-streaming at concurrency
    // 64, then a few of every case, for every setup.
    for (const s of setups) {
      const t: Tally = { samples: [], wallMs: 0, serviceCpu: 0, envoyCpu: 0, errors: 0, firstError: '' };
      const warm: Case = {
        name: 'warmup',
        phase,
        path: stack.urls[s] + '/v1/chat/completions',
        body: chatBody(false),
        stream: false,
        concurrency: 64,
        requests: args.warmup,
        timeoutMs: 60_000,
      };
      if (args.warmup > 0) await runBlock(warm, s, stack, client, t, args.warmup);
      for (const c of cases)
        await runBlock({ ...c, path: stack.urls[s] + c.path }, s, stack, client, t, Math.min(c.requests, Math.max(c.concurrency, 2)));
      if (t.errors > 0) throw new Error(`warm-up failed: ${t.firstError}`);
      say(`${phase}: ${s} warmed up (${t.samples.length} requests)`);
    }
    if (args.idleSeconds > 0) {
      idle = await idleCpu(stack, args.idleSeconds);
      say(`${phase}: idle CPU ms/s ${JSON.stringify(idle)}`);
    }
    for (const c of cases) {
      const tallies = Object.fromEntries(
        setups.map((s) => [s, { samples: [], wallMs: 0, serviceCpu: 0, envoyCpu: 0, errors: 0, firstError: '' } as Tally]),
      ) as Record<Setup, Tally>;
      for (let r = 0; r < args.rounds; r++) {
        const order = setups.map((_, i) => setups[(i + r) % setups.length]!);
        for (const s of order) await runBlock({ ...c, path: stack.urls[s] + c.path }, s, stack, client, tallies[s], c.requests);
      }
      out[c.name] = Object.fromEntries(setups.map((s) => [s, result(s, tallies[s])]));
      const line = setups
        .map((s) => {
          const x = out[c.name]![s]!;
          return `${s}: p50 ${x.p50.toFixed(1)} p99 ${x.p99.toFixed(1)} ms, ${x.rps} req/s, cpu ${x.service_cpu_ms_per_request ?? '-'} ms/req (envoy ${x.envoy_cpu_ms_per_request})${x.errors ? `, ${x.errors} errors` : ''}`;
        })
        .join(' | ');
      say(`${c.name}: ${line}`);
      const errs = setups.map((s) => tallies[s].firstError).filter(Boolean);
      if (errs.length > 0) say(`${c.name}: first errors: ${errs.join('; ')}`);
    }
  } finally {
    await client.close();
    await stack.stop();
  }
  return { cases: out, idle_cpu_ms_per_s: idle };
}

/** The README table: one row per case and figure, one column per setup, and ours/go. */
function markdownTable(...phases: Array<Record<string, Record<string, SetupResult>>>): string {
  const rows = ['| case | figure | floor (Envoy only) | ours | Go coordinator | ours / Go |', '|---|---|---|---|---|---|'];
  const f = (n: number | null | undefined) => (n === null || n === undefined ? '-' : String(n));
  const ratio = (a: number | null | undefined, b: number | null | undefined) => (a && b ? (a / b).toFixed(2) : '-');
  for (const phase of phases) {
    for (const [name, r] of Object.entries(phase)) {
      const [floor, ours, go] = [r['floor'], r['ours'], r['go']];
      const fig = (label: string, pick: (x: SetupResult | undefined) => number | null | undefined) =>
        rows.push(`| ${name} | ${label} | ${f(pick(floor))} | ${f(pick(ours))} | ${f(pick(go))} | ${ratio(pick(ours), pick(go))} |`);
      fig('p50 ms', (x) => x?.p50);
      fig('p99 ms', (x) => x?.p99);
      fig('req/s', (x) => x?.rps);
      fig('service CPU ms/req', (x) => x?.service_cpu_ms_per_request);
      fig('Envoy CPU ms/req', (x) => x?.envoy_cpu_ms_per_request);
    }
  }
  return rows.join('\n');
}

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

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const say = (msg: string) => process.stdout.write(`bench: ${msg}\n`);
  const peers = process.env['PEERS_BIN'];
  if (!peers) {
    process.stderr.write(
      'bench compare: needs PEERS_BIN, a folder with the prebuilt `coordinator` (and `llm-d-inference-sim`, or pass --own-sims for our sim/ workers)\n',
    );
    process.exit(2);
  }
  const missing = ['coordinator', ...(args.ownSims ? [] : ['llm-d-inference-sim'])].filter((b) => !existsSync(join(peers, b)));
  if (missing.length > 0) {
    process.stderr.write(
      `bench compare: PEERS_BIN=${peers} has no ${missing.join(', ')}${args.ownSims ? '' : ' (--own-sims runs our sim/ workers instead)'}\n`,
    );
    process.exit(2);
  }
  ensureEnvoy();
  buildService(say);
  const setups: Setup[] = ['floor', 'ours', 'go'];
  const chat = '/v1/chat/completions';
  const fast: Case[] = [];
  if (args.fastRequests > 0)
    fast.push({
      name: 'nonstream_c8_fast',
      phase: 'fast',
      path: chat,
      body: chatBody(false),
      stream: false,
      concurrency: 8,
      requests: args.fastRequests,
      timeoutMs: 30_000,
    });
  if (args.largeRequests > 0)
    fast.push({
      name: 'generate_20mb_c1',
      phase: 'fast',
      path: '/inference/v1/generate',
      body: generateBody(20 * MB),
      stream: false,
      concurrency: 1,
      requests: args.largeRequests,
      timeoutMs: 120_000,
    });
  const real: Case[] = [];
  for (const [c, n] of [
    [1, args.c1Requests],
    [8, args.c8Requests],
    [32, args.c32Requests],
  ] as const) {
    if (n > 0)
      real.push({
        name: `nonstream_c${c}_realistic`,
        phase: 'realistic',
        path: chat,
        body: chatBody(false),
        stream: false,
        concurrency: c,
        requests: n,
        timeoutMs: 60_000,
      });
  }
  if (args.streamRequests > 0)
    real.push({
      name: 'stream_c64_realistic',
      phase: 'realistic',
      path: chat,
      body: chatBody(true),
      stream: true,
      concurrency: 64,
      requests: args.streamRequests,
      timeoutMs: 60_000,
    });
  if (args.c32Requests > 0)
    real.push({
      name: 'stream_c32_realistic',
      phase: 'realistic',
      path: chat,
      body: chatBody(true),
      stream: true,
      concurrency: 32,
      requests: args.c32Requests,
      timeoutMs: 60_000,
    });

  const started = new Date().toISOString();
  const fastOut = await runPhase('fast', fast, setups, args, say);
  const realOut = await runPhase('realistic', real, setups, args, say);
  const serviceNodeVersion = execFileSync(args.serviceNode, ['--version'], { encoding: 'utf8' }).trim();
  const doc = {
    suite: 'compare',
    date: started,
    machine: machineDescription([
      'envoy 1.40.0 (--concurrency 1)',
      'shared with other jobs: latency and req/s are noisy, CPU per request is the robust figure',
    ]),
    service_node: serviceNodeVersion,
    workers: args.ownSims ? 'sim/ (this repository)' : 'llm-d-inference-sim (PEERS_BIN), GOMAXPROCS=1, --force-dummy-tokenizer',
    peer_commits: peerCommits(),
    setup: {
      body_mode: args.bodyMode,
      rounds: args.rounds,
      pipeline:
        'render (direct) -> prefill (via the Envoy gateway listener) -> decode; kv-nixl; both services at log level 2 (info: nothing per request)',
      floor: 'client -> Envoy gateway listener (epp-profile: decode) -> decode worker',
      ours: 'client -> Envoy public listener -> epd-coordinator ext_proc -> decode worker (the answer bypasses the service)',
      go: 'client -> Go coordinator -> Envoy gateway listener -> decode worker (it copies the answer); no Envoy in front of it',
      request: `chat: ${Buffer.byteLength(PROMPT)}-byte prompt, max_tokens ${MAX_TOKENS}, echo decode worker; generate: 20 MB token-ids body`,
      fast: 'zero simulator latency',
      realistic: '20 ms to the first token, 5 ms per token (decode and prefill workers)',
      cpu: 'utime+stime from /proc/<pid>/stat over the blocks of each setup, divided by its requests (clock ticks of 10 ms)',
    },
    idle_cpu_ms_per_s: { fast: fastOut.idle_cpu_ms_per_s, realistic: realOut.idle_cpu_ms_per_s },
    fast: fastOut.cases,
    realistic: realOut.cases,
  };
  mkdirSync(join(args.out, '..'), { recursive: true });
  writeFileSync(args.out, `${JSON.stringify(doc, null, 2)}\n`);
  say(`wrote ${args.out}`);
  process.stdout.write(`\n${markdownTable(doc.fast, doc.realistic)}\n`);
  const errors = [...Object.values(fastOut.cases), ...Object.values(realOut.cases)]
    .flatMap((c) => Object.values(c))
    .reduce((a, r) => a + r.errors, 0);
  if (errors > 0) throw new Error(`${errors} request(s) failed (see the lines above)`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
