/**
 * `npm run bench -- selective`: what selective disaggregation saves for short prompts.
 *
 * One run starts two stacks side by side (simulators, the built coordinator, Envoy; separate
 * processes on loopback), identical but for the prefill step:
 * - with:    `prefill: {min_prompt_tokens: N}`, so a short prompt skips the prefill leg and decodes
 *            aggregated;
 * - without: the default (always disaggregate): render -> prefill leg -> decode.
 * Short streaming chat requests then alternate between the two stacks, so both share machine noise.
 * TTFT is measured at the client (request sent -> first SSE data). CPU is read from /proc for every
 * process of each stack over the measured phase (coordinator, each simulator, Envoy) and reported
 * per request. Every measured request's `disaggregation` is checked in Envoy's access log.
 * Writes bench/results/selective.json. The figures are ratios within one run; absolute numbers
 * depend on the machine's load.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { REPO_ROOT } from '../launch/envoy-bootstrap';
import { buildService, freeStackPorts, startLocalStack, type LocalStack } from '../launch/local-stack';
import { ensureEnvoy } from '../launch/envoy';
import { sleep } from '../launch/ports';
import { parseBenchArgs } from './args';
import { machineDescription, round3, summarize, type Summary } from './stats';

type Variant = 'with' | 'without';
const VARIANTS: readonly Variant[] = ['with', 'without'];

const INTS = {
  requests: { flag: 'requests', default: 200, min: 1, max: 100_000 },
  warmup: { flag: 'warmup', default: 10, min: 0, max: 10_000 },
  minPromptTokens: { flag: 'min-prompt-tokens', default: 64, min: 1, max: 1_000_000 },
  ttftMs: { flag: 'ttft-ms', default: 20, min: 0, max: 10_000 },
  itlMs: { flag: 'itl-ms', default: 2, min: 0, max: 1000 },
  maxSeconds: { flag: 'max-seconds', default: 240, min: 1, max: 3600 },
} as const;

/** Twelve words (13 tokens with the dummy tokenizer's BOS), well under the threshold. */
const SHORT_PROMPT = 'what is the capital of france and why is it famous today';

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ; 100 on every Linux this runs on). */
const USER_HZ = 100;

/** utime + stime of a process, in ms; 0 when it is gone or /proc is unreadable. */
function cpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces) start at index 2 (state).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / USER_HZ;
  } catch {
    return 0;
  }
}

function cpuByProcess(stack: LocalStack): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of stack.pids) out[p.name] = cpuMs(p.pid);
  return out;
}

/** `disaggregation` per request id, from Envoy's JSON access log (public listener lines). */
function disaggregationOf(accessLogPath: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of readFileSync(accessLogPath, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    try {
      const e = JSON.parse(line) as { listener?: string; x_request_id?: string; disaggregation?: string };
      if (e.listener === 'public' && e.x_request_id && e.disaggregation) out.set(e.x_request_id, e.disaggregation);
    } catch {
      // a line still being written
    }
  }
  return out;
}

class Runner {
  errors = 0;
  firstError = '';
  private readonly agent = new Agent({ keepAliveTimeout: 10_000, connections: 8 });
  private seq = 0;
  readonly ids: Record<Variant, string[]> = { with: [], without: [] };

  /** One streaming request; returns TTFT in ms, or null on failure. */
  async once(url: string, variant: Variant, measured: boolean): Promise<number | null> {
    const id = `bench-sel-${variant}-${process.pid}-${++this.seq}`;
    if (measured) this.ids[variant].push(id);
    const t0 = process.hrtime.bigint();
    let ttft = -1;
    let text = '';
    try {
      const res = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        dispatcher: this.agent,
        headers: { 'content-type': 'application/json', 'x-request-id': id },
        body: JSON.stringify({ model: 'sim-model', stream: true, messages: [{ role: 'user', content: SHORT_PROMPT }] }),
        signal: AbortSignal.timeout(30_000),
      });
      for await (const chunk of res.body) {
        const s = (chunk as Buffer).toString('utf8');
        if (ttft < 0 && s.includes('data:')) ttft = Number(process.hrtime.bigint() - t0) / 1e6;
        text += s;
      }
      if (res.statusCode !== 200 || !text.includes('data: [DONE]')) throw new Error(`HTTP ${res.statusCode} ${text.slice(0, 200)}`);
    } catch (err) {
      this.errors++;
      this.firstError ||= `${variant}: ${(err as Error).message}`;
      return null;
    }
    return ttft;
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}

async function main(): Promise<void> {
  const args = parseBenchArgs(process.argv.slice(2), 'selective', join(REPO_ROOT, 'bench', 'results', 'selective.json'), INTS);
  const say = (msg: string) => process.stdout.write(`bench: ${msg}\n`);
  const deadline = Date.now() + args.maxSeconds * 1000;
  ensureEnvoy();
  buildService(say);
  const stacks: Partial<Record<Variant, LocalStack>> = {};
  const stopAll = async () => {
    for (const s of Object.values(stacks)) await s.stop().catch(() => undefined);
  };
  process.once('SIGINT', () => void stopAll().then(() => process.exit(130)));
  process.once('SIGTERM', () => void stopAll().then(() => process.exit(143)));
  const runner = new Runner();
  let truncated = false;
  try {
    for (const v of VARIANTS) {
      const dir = join(REPO_ROOT, '.cache', 'bench-selective', v);
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir, { recursive: true });
      stacks[v] = await startLocalStack({
        dir,
        ports: { ...(await freeStackPorts()), metrics: 0 },
        bodyMode: args.bodyMode,
        kvConnector: 'kv-nixl',
        simArgs: ['--time-to-first-token-ms', String(args.ttftMs), '--inter-token-latency-ms', String(args.itlMs)],
        prefillParams: v === 'with' ? { min_prompt_tokens: args.minPromptTokens } : undefined,
        flushIntervalMs: 200,
        cpuProfileDir: args.cpuProfileDir ? join(args.cpuProfileDir, v) : undefined,
        builtService: true,
        say: (m) => say(`[${v}] ${m}`),
      });
    }
    const s = stacks as Record<Variant, LocalStack>;

    say(`warm-up: ${args.warmup} requests per stack`);
    for (let i = 0; i < args.warmup; i++) for (const v of VARIANTS) await runner.once(s[v].publicUrl, v, false);
    if (runner.errors > 0) throw new Error(`warm-up failed: ${runner.firstError}`);

    say(`measured: ${args.requests} short streaming requests per stack, alternating`);
    const cpu0 = { with: cpuByProcess(s.with), without: cpuByProcess(s.without) };
    const ttfts: Record<Variant, number[]> = { with: [], without: [] };
    for (let i = 0; i < args.requests; i++) {
      if (Date.now() > deadline) {
        truncated = true;
        break;
      }
      for (const v of i % 2 === 0 ? VARIANTS : [...VARIANTS].reverse()) {
        const t = await runner.once(s[v].publicUrl, v, true);
        if (t !== null) ttfts[v].push(t);
      }
    }
    const cpu1 = { with: cpuByProcess(s.with), without: cpuByProcess(s.without) };

    await sleep(600);
    const expected: Record<Variant, string> = { with: 'aggregated_short_prompt', without: 'disaggregated' };
    let wrongPath = 0;
    for (const v of VARIANTS) {
      const seen = disaggregationOf(s[v].accessLogPath);
      for (const id of runner.ids[v]) if (seen.get(id) !== expected[v]) wrongPath++;
    }

    const n = Math.min(ttfts.with.length, ttfts.without.length);
    const cpuPerRequest = (v: Variant): Record<string, number> => {
      const out: Record<string, number> = {};
      let total = 0;
      for (const [name, end] of Object.entries(cpu1[v])) {
        const ms = end - (cpu0[v][name] ?? 0);
        total += ms;
        out[name] = round3(ms / Math.max(1, ttfts[v].length));
      }
      out['total'] = round3(total / Math.max(1, ttfts[v].length));
      return out;
    };
    const cpu = { with: cpuPerRequest('with'), without: cpuPerRequest('without') };
    const ttft: Record<Variant, Summary> = { with: summarize(ttfts.with), without: summarize(ttfts.without) };
    const ratio = (a: number | undefined, b: number | undefined) => (a !== undefined && b ? round3(a / b) : null);
    const result = {
      suite: 'selective',
      median_ttft_ms: { with: ttft.with.p50, without: ttft.without.p50 },
      ratio_ttft_p50_with_over_without: ratio(ttft.with.p50, ttft.without.p50),
      cpu_ms_per_request: cpu,
      ratio_cpu_total_with_over_without: ratio(cpu.with['total'], cpu.without['total']),
      ratio_cpu_coordinator_with_over_without: ratio(cpu.with['epd-coordinator'], cpu.without['epd-coordinator']),
      requests: n,
      date: new Date().toISOString(),
      machine: machineDescription(['envoy 1.40.0 (--concurrency 1)']),
      setup: {
        body_mode: args.bodyMode,
        pipeline: 'render -> prefill -> decode (kv-nixl); "with": prefill min_prompt_tokens ' + args.minPromptTokens,
        request: `POST /v1/chat/completions, stream:true, one ${SHORT_PROMPT.split(' ').length}-word user message (below the threshold)`,
        simulated_latency: {
          time_to_first_token_ms: args.ttftMs,
          inter_token_latency_ms: args.itlMs,
          applies_to: 'every simulator (prefill and decode alike); no simulated KV transfer cost',
        },
        cpu: 'utime+stime from /proc/<pid>/stat over the measured phase, per process, divided by the requests that stack served (USER_HZ resolution: 10 ms)',
        ttft: 'client side: request sent -> first read carrying SSE data',
        warmup: args.warmup,
        truncated_by_time: truncated,
      },
      ttft_ms: ttft,
      errors: runner.errors,
      wrong_path: wrongPath,
    };
    mkdirSync(join(args.out, '..'), { recursive: true });
    writeFileSync(args.out, `${JSON.stringify(result, null, 2)}\n`);

    const row = (name: string, t: Summary) =>
      `  ${name.padEnd(8)} ttft p50 ${t.p50.toFixed(3).padStart(9)} ms   p90 ${t.p90.toFixed(3).padStart(9)} ms   (n=${t.n})`;
    process.stdout.write(`\nselective disaggregation (${args.bodyMode}), short streaming prompts:\n`);
    process.stdout.write(
      `${row('with', ttft.with)}   cpu ${cpu.with['total']} ms/request\n${row('without', ttft.without)}   cpu ${cpu.without['total']} ms/request\n`,
    );
    process.stdout.write(
      `  with/without: ttft p50 ${result.ratio_ttft_p50_with_over_without}x, cpu total ${result.ratio_cpu_total_with_over_without}x, coordinator cpu ${result.ratio_cpu_coordinator_with_over_without}x\n`,
    );
    process.stdout.write(`wrote ${args.out}${truncated ? ' (stopped early: --max-seconds reached)' : ''}\n`);
    if (runner.errors > 0) throw new Error(`${runner.errors} request(s) failed; first: ${runner.firstError}`);
    if (wrongPath > 0) throw new Error(`${wrongPath} request(s) did not take the expected path`);
  } finally {
    await runner.close();
    await stopAll();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${(err as Error).message}\n`);
  process.exit(1);
});
