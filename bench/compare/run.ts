/**
 * Runs the cases of one phase on one stack: a warm-up for every setup, the idle CPU, then each case
 * in rounds, every setup one block per round in rotating order (drift on a shared machine falls on
 * all of them). Per block it reads the CPU time of our service, the Go coordinator, Envoy and the
 * EPP from /proc, and the resident memory of both services afterwards.
 */
import { Agent } from 'undici';
import { httpGet } from '../../launch/envoy';
import { percentile, round3, summarize, type Summary } from '../stats';
import { cpuSeconds, rssMb } from './procs';
import type { CompareStack, Setup } from './stack';
import { timedPost, type Case } from './workload';

interface Tally {
  total: number[];
  firstByte: number[];
  wallMs: number;
  cpu: { service: number; envoy: number; epp: number };
  errors: number;
  firstError: string;
}

const tally = (): Tally => ({ total: [], firstByte: [], wallMs: 0, cpu: { service: 0, envoy: 0, epp: 0 }, errors: 0, firstError: '' });

export interface Distribution extends Summary {
  /** p1, p25, p50, p75, p99: a box plot's five numbers. */
  readonly box: readonly number[];
}

export interface SetupResult {
  readonly total: Distribution;
  /** Time to the first body byte (streaming cases). */
  readonly ttft?: Distribution;
  readonly rps: number;
  readonly service_cpu_ms_per_request: number | null;
  readonly envoy_cpu_ms_per_request: number;
  readonly epp_cpu_ms_per_request: number | null;
  /** Service + Envoy + EPP. */
  readonly system_cpu_ms_per_request: number;
  /** Above the floor's figure in the same case (ms); null for the floor. */
  readonly added_ms: { p50: number; p99: number; ttft_p50?: number; ttft_p99?: number } | null;
  readonly errors: number;
}

export interface MemorySample {
  readonly ours_rss_mb: number;
  readonly go_rss_mb: number;
  /** The bare Node coordinator. */
  readonly node_rss_mb?: number;
  /** From our /metrics: heap used and the young generation's size (V8 `new` space). */
  readonly ours_heap_used_mb: number | null;
  readonly ours_new_space_mb: number | null;
  readonly ours_old_space_mb: number | null;
}

/** One case's result per setup: `floor`, `ours` and `go` always, `node` where the stack has it. */
export type CaseResult = Record<'floor' | 'ours' | 'go', SetupResult> & { readonly node?: SetupResult };

export interface PhaseResult {
  readonly cases: Record<string, CaseResult>;
  /**
   * Each setup's service CPU per request over its warm-up (null for the floor): the start-up cost
   * the measured rounds leave out, V8 compiling our hot path above all (Go compiles ahead of time).
   * It covers the whole warm-up: the `warmup` requests and the few of every case after them, among
   * them two 20 MB bodies in the zero-latency phase (not for the Node floor, which does chat only).
   */
  readonly warmup_service_cpu_ms_per_request?: Partial<Record<Setup, number | null>>;
  readonly idle_cpu_ms_per_s: Record<string, number> | null;
  readonly memory: { after_warmup: MemorySample | null; after_case: Record<string, MemorySample> };
}

function distribution(samples: readonly number[]): Distribution {
  return { ...summarize(samples), box: [1, 25, 50, 75, 99].map((p) => round3(percentile(samples, p))) };
}

function metric(text: string, re: RegExp): number | null {
  const m = re.exec(text);
  return m ? Math.round(Number(m[1]) / 1e5) / 10 : null;
}

export async function memorySample(stack: CompareStack): Promise<MemorySample> {
  let text = '';
  try {
    text = (await httpGet(stack.oursMetricsUrl, 3000)).body;
  } catch {
    // no metrics: heap figures stay null
  }
  return {
    ours_rss_mb: rssMb(stack.pids.ours),
    go_rss_mb: rssMb(stack.pids.go),
    ...(stack.pids.node ? { node_rss_mb: rssMb(stack.pids.node) } : {}),
    ours_heap_used_mb: metric(text, /^nodejs_heap_size_used_bytes(?:\{[^}]*\})? ([0-9.e+]+)/m),
    ours_new_space_mb: metric(text, /^nodejs_heap_space_size_total_bytes\{[^}]*space="new"[^}]*\} ([0-9.e+]+)/m),
    ours_old_space_mb: metric(text, /^nodejs_heap_space_size_total_bytes\{[^}]*space="old"[^}]*\} ([0-9.e+]+)/m),
  };
}

async function runBlock(c: Case, setup: Setup, stack: CompareStack, agent: Agent, t: Tally, n: number): Promise<void> {
  const headers = setup === 'floor' ? stack.floorHeaders : {};
  const base = stack.urls[setup];
  if (base === undefined) throw new Error(`${stack.topology}: no ${setup} setup`);
  const url = base + c.path;
  const servicePid = setup === 'floor' ? undefined : stack.pids[setup];
  // The node setup has an Envoy of its own; in the deploy topology it shares the EPP, which works
  // for one setup at a time (the rounds are sequential).
  const envoyPid = setup === 'node' ? stack.pids.nodeEnvoy! : stack.pids.envoy;
  const eppPid = stack.pids.epp;
  const cpu0 = {
    service: servicePid ? cpuSeconds(servicePid) : 0,
    envoy: cpuSeconds(envoyPid),
    epp: eppPid ? cpuSeconds(eppPid) : 0,
  };
  const t0 = performance.now();
  let issued = 0;
  const worker = async () => {
    while (issued < n) {
      issued++;
      const r = await timedPost(agent, url, c, headers);
      t.total.push(r.totalMs);
      t.firstByte.push(r.firstByteMs);
      if (r.error) {
        t.errors++;
        t.firstError ||= `${c.name}/${setup}: ${r.error}`;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(c.concurrency, n) }, worker));
  t.wallMs += performance.now() - t0;
  if (servicePid) t.cpu.service += cpuSeconds(servicePid) - cpu0.service;
  t.cpu.envoy += cpuSeconds(envoyPid) - cpu0.envoy;
  if (eppPid) t.cpu.epp += cpuSeconds(eppPid) - cpu0.epp;
}

function result(setup: Setup, c: Case, t: Tally, floor: SetupResult | undefined, hasEpp: boolean): SetupResult {
  const n = t.total.length;
  const per = (s: number) => round3((s * 1000) / n);
  const total = distribution(t.total);
  const ttft = c.stream ? distribution(t.firstByte) : undefined;
  const added =
    floor && setup !== 'floor'
      ? {
          p50: round3(total.p50 - floor.total.p50),
          p99: round3(total.p99 - floor.total.p99),
          ...(ttft && floor.ttft ? { ttft_p50: round3(ttft.p50 - floor.ttft.p50), ttft_p99: round3(ttft.p99 - floor.ttft.p99) } : {}),
        }
      : null;
  return {
    total,
    ...(ttft ? { ttft } : {}),
    rps: round3((n * 1000) / t.wallMs),
    service_cpu_ms_per_request: setup === 'floor' ? null : per(t.cpu.service),
    envoy_cpu_ms_per_request: per(t.cpu.envoy),
    epp_cpu_ms_per_request: hasEpp ? per(t.cpu.epp) : null,
    system_cpu_ms_per_request: per(t.cpu.service + t.cpu.envoy + t.cpu.epp),
    added_ms: added,
    errors: t.errors,
  };
}

async function idleCpu(stack: CompareStack, seconds: number): Promise<Record<string, number>> {
  const pids: Record<string, number> = { ours: stack.pids.ours, go: stack.pids.go, envoy: stack.pids.envoy };
  if (stack.pids.epp) pids['epp'] = stack.pids.epp;
  if (stack.pids.node) pids['node'] = stack.pids.node;
  if (stack.pids.nodeEnvoy) pids['node_envoy'] = stack.pids.nodeEnvoy;
  // Let the warm-up's deferred work (concurrent compiles, a GC, idle sockets closing) finish first.
  await new Promise((r) => setTimeout(r, 3000));
  const before = Object.fromEntries(Object.entries(pids).map(([k, p]) => [k, cpuSeconds(p)]));
  await new Promise((r) => setTimeout(r, seconds * 1000));
  return Object.fromEntries(Object.entries(pids).map(([k, p]) => [k, round3(((cpuSeconds(p) - before[k]!) * 1000) / seconds)]));
}

function line(name: string, setups: readonly Setup[], r: CaseResult): string {
  return `${name}: ${setups
    .map((s) => {
      const x = r[s]!;
      const ttft = x.ttft ? ` ttft p50 ${x.ttft.p50.toFixed(1)} p99 ${x.ttft.p99.toFixed(1)},` : '';
      const cpu = x.service_cpu_ms_per_request ?? '-';
      const err = x.errors ? `, ${x.errors} errors` : '';
      return `${s}:${ttft} p50 ${x.total.p50.toFixed(1)} p99 ${x.total.p99.toFixed(1)} ms, ${x.rps} req/s, cpu ${cpu} (system ${x.system_cpu_ms_per_request}) ms/req${err}`;
    })
    .join(' | ')}`;
}

/** The bare Node coordinator does chat only (the bench's 20 MB generate body is already ahead of Go). */
const setupsOf = (stack: CompareStack, c: Case): readonly Setup[] =>
  c.path.endsWith('/chat/completions') ? stack.setups : stack.setups.filter((s) => s !== 'node');

export interface RunOptions {
  readonly rounds: number;
  readonly warmup: number;
  /** The warm-up's concurrency: high enough that `warmup` requests at this phase's latency take minutes, not an hour. */
  readonly warmupConcurrency: number;
  readonly idleSeconds: number;
  readonly label: string;
  readonly say: (m: string) => void;
}

export async function runPhase(stack: CompareStack, cases: readonly Case[], o: RunOptions): Promise<PhaseResult> {
  const agent = new Agent({ keepAliveTimeout: 10_000, connections: 64 });
  const out: Record<string, CaseResult> = {};
  const setups = stack.setups;
  const memory: PhaseResult['memory'] = { after_warmup: null, after_case: {} };
  let idle: Record<string, number> | null = null;
  const warmupCpu: Partial<Record<Setup, number | null>> = {};
  try {
    // Warm-up until V8 has compiled the hot path, for every setup: a few of every case, then the
    // first case at `warmupConcurrency`. V8 goes on optimising our service for about 12,000 requests
    // (README, Performance); its compiles, on V8's worker threads, would otherwise be billed to the
    // measured requests of a service that runs for days. The few come first: a request of a new
    // kind (the 20 MB body) deoptimises code that had not seen it, and the long run after it lets
    // V8 compile that code again before the rounds, as a service that has seen every kind of
    // request would have it. Their cost is reported apart.
    for (const s of setups) {
      const t = tally();
      const first = cases[0]!;
      for (const c of cases)
        if (setupsOf(stack, c).includes(s)) await runBlock(c, s, stack, agent, t, Math.min(c.requests, Math.max(c.concurrency, 2)));
      if (o.warmup > 0)
        await runBlock({ ...first, stream: false, body: first.body, concurrency: o.warmupConcurrency }, s, stack, agent, t, o.warmup);
      if (t.errors > 0) throw new Error(`warm-up failed: ${t.firstError}`);
      warmupCpu[s] = s === 'floor' ? null : round3((t.cpu.service * 1000) / t.total.length);
      o.say(`${o.label}: ${s} warmed up (${t.total.length} requests, service CPU ${warmupCpu[s] ?? '-'} ms/req)`);
    }
    memory.after_warmup = await memorySample(stack);
    o.say(`${o.label}: memory after warm-up ${JSON.stringify(memory.after_warmup)}`);
    if (o.idleSeconds > 0) {
      idle = await idleCpu(stack, o.idleSeconds);
      o.say(`${o.label}: idle CPU ms/s ${JSON.stringify(idle)}`);
    }
    for (const c of cases) {
      const here = setupsOf(stack, c);
      const tallies = Object.fromEntries(here.map((s) => [s, tally()])) as Record<Setup, Tally>;
      for (let r = 0; r < o.rounds; r++) {
        for (let i = 0; i < here.length; i++) {
          const s = here[(i + r) % here.length]!;
          await runBlock(c, s, stack, agent, tallies[s], c.requests);
        }
      }
      const epp = stack.pids.epp !== undefined;
      const floor = result('floor', c, tallies.floor, undefined, epp);
      out[c.name] = {
        floor,
        ours: result('ours', c, tallies.ours, floor, epp),
        go: result('go', c, tallies.go, floor, epp),
        ...(here.includes('node') ? { node: result('node', c, tallies.node, floor, false) } : {}),
      };
      memory.after_case[c.name] = await memorySample(stack);
      o.say(line(c.name, here, out[c.name]!));
      const errs = here.map((s) => tallies[s].firstError).filter(Boolean);
      if (errs.length > 0) o.say(`${c.name}: first errors: ${errs.join('; ')}`);
    }
  } finally {
    await agent.close();
  }
  return { cases: out, warmup_service_cpu_ms_per_request: warmupCpu, idle_cpu_ms_per_s: idle, memory };
}
