/**
 * `npm run bench -- conditional`: what the conditional-decode probe costs on a miss and saves on a
 * hit, for streaming requests.
 *
 * One run starts the local stack (simulators, the coordinator, Envoy; separate processes on
 * loopback) with the pipeline render -> conditional-decode -> prefill -> decode, the decode
 * simulator standing in for the EPP's 412 gate, and simulated model latency. Then, interleaved so
 * both share machine noise:
 * - miss: a prompt never seen (a unique first word): probe answered 412, then prefill and decode;
 * - hit:  a prompt served before: the probe's answer streams back through Envoy's streamed
 *         immediate response.
 * TTFT is measured at the client: from sending the request to the first SSE data. Total is to the
 * last byte. Every request's path is checked in Envoy's access log (`path_taken`).
 * Writes bench/results/conditional.json.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { REPO_ROOT } from '../launch/envoy-bootstrap';
import { parseBenchArgs, startBenchStack } from './args';
import { sleep } from '../launch/ports';
import { machineDescription, round3, summarize, type Summary } from './stats';

type Path = 'hit' | 'miss';

const INTS = {
  requests: { flag: 'requests', default: 200, min: 1, max: 100_000 },
  warmup: { flag: 'warmup', default: 10, min: 0, max: 10_000 },
  hitPrompts: { flag: 'hit-prompts', default: 20, min: 1, max: 1000 },
  ttftMs: { flag: 'ttft-ms', default: 50, min: 0, max: 10_000 },
  itlMs: { flag: 'itl-ms', default: 10, min: 0, max: 1000 },
  maxSeconds: { flag: 'max-seconds', default: 240, min: 1, max: 3600 },
} as const;

function parseArgs(argv: readonly string[]) {
  return parseBenchArgs(argv, 'conditional', join(REPO_ROOT, 'bench', 'results', 'conditional.json'), INTS);
}

/** Twelve words after a distinguishing first word: the echo simulator streams them back, one per token. */
const TAIL = 'describe how a cached prefix lets the decode worker answer without prefill today';
const promptFor = (tag: string): string => `${tag} ${TAIL}`;

interface Sample {
  readonly ttftMs: number;
  readonly totalMs: number;
}

class Runner {
  errors = 0;
  firstError = '';
  private readonly agent = new Agent({ keepAliveTimeout: 10_000, connections: 8 });
  private seq = 0;
  /** request id -> the path it should have taken. */
  readonly expected = new Map<string, Path>();

  constructor(private readonly publicUrl: string) {}

  /** One streaming request; TTFT is the first read carrying SSE data. */
  async once(prompt: string, path: Path | null): Promise<Sample | null> {
    const id = `bench-cd-${process.pid}-${++this.seq}`;
    if (path) this.expected.set(id, path);
    const body = JSON.stringify({ model: 'sim-model', stream: true, messages: [{ role: 'user', content: prompt }] });
    const t0 = process.hrtime.bigint();
    let ttft = -1;
    let text = '';
    try {
      const res = await request(`${this.publicUrl}/v1/chat/completions`, {
        method: 'POST',
        dispatcher: this.agent,
        headers: { 'content-type': 'application/json', 'x-request-id': id },
        body,
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
      this.firstError ||= `${path ?? 'warm-up'}: ${(err as Error).message}`;
      return null;
    }
    return { ttftMs: ttft, totalMs: Number(process.hrtime.bigint() - t0) / 1e6 };
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}

/** path_taken per request id, from Envoy's JSON access log (public listener lines). */
function pathsTaken(accessLogPath: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of readFileSync(accessLogPath, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    try {
      const e = JSON.parse(line) as { listener?: string; x_request_id?: string; path_taken?: string };
      if (e.listener === 'public' && e.x_request_id && e.path_taken) out.set(e.x_request_id, e.path_taken);
    } catch {
      // a line still being written
    }
  }
  return out;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const say = (msg: string) => process.stdout.write(`bench: ${msg}\n`);
  const deadline = Date.now() + args.maxSeconds * 1000;
  const stack = await startBenchStack('conditional', args, say, {
    conditionalDecode: true,
    simArgs: ['--time-to-first-token-ms', String(args.ttftMs), '--inter-token-latency-ms', String(args.itlMs)],
    flushIntervalMs: 200,
  });
  const stopOnSignal = () => void stack.stop().then(() => process.exit(130));
  process.once('SIGINT', stopOnSignal);
  process.once('SIGTERM', stopOnSignal);
  const runner = new Runner(stack.publicUrl);
  let truncated = false;

  try {
    // Each hit prompt is served once first (a miss), which puts its prefix in the decode pool.
    const hitPrompts = Array.from({ length: args.hitPrompts }, (_, i) => promptFor(`cached${i}`));
    say(`warm-up: ${hitPrompts.length} hit prompts served once, then ${args.warmup} requests per path`);
    for (const p of hitPrompts) await runner.once(p, null);
    let missSeq = 0;
    for (let i = 0; i < args.warmup; i++) {
      await runner.once(hitPrompts[i % hitPrompts.length]!, null);
      await runner.once(promptFor(`warm${++missSeq}`), null);
    }
    if (runner.errors > 0) throw new Error(`warm-up failed: ${runner.firstError}`);

    say(`measured: ${args.requests} streaming requests per path, interleaved`);
    const samples: Record<Path, Sample[]> = { hit: [], miss: [] };
    for (let i = 0; i < args.requests; i++) {
      if (Date.now() > deadline) {
        truncated = true;
        break;
      }
      const order: Path[] = i % 2 === 0 ? ['hit', 'miss'] : ['miss', 'hit'];
      for (const path of order) {
        const prompt = path === 'hit' ? hitPrompts[i % hitPrompts.length]! : promptFor(`fresh${++missSeq}`);
        const s = await runner.once(prompt, path);
        if (s) samples[path].push(s);
      }
    }

    // Every measured request took the path it was meant to (the access log is flushed periodically).
    await sleep(600);
    const taken = pathsTaken(stack.accessLogPath);
    let wrongPath = 0;
    for (const [id, path] of runner.expected) {
      if (taken.get(id) !== (path === 'hit' ? 'cache_hit' : 'cascade')) wrongPath++;
    }

    const ttft = { hit: summarize(samples.hit.map((s) => s.ttftMs)), miss: summarize(samples.miss.map((s) => s.ttftMs)) };
    const total = { hit: summarize(samples.hit.map((s) => s.totalMs)), miss: summarize(samples.miss.map((s) => s.totalMs)) };
    const result = {
      suite: 'conditional',
      median_ttft_ms: { hit: ttft.hit.p50, miss: ttft.miss.p50 },
      median_total_ms: { hit: total.hit.p50, miss: total.miss.p50 },
      ratio_ttft_p50_hit_over_miss: round3(ttft.hit.p50 / ttft.miss.p50),
      ratio_total_p50_hit_over_miss: round3(total.hit.p50 / total.miss.p50),
      requests: Math.min(samples.hit.length, samples.miss.length),
      date: new Date().toISOString(),
      machine: machineDescription(['envoy 1.40.0 (--concurrency 1)']),
      setup: {
        body_mode: args.bodyMode,
        pipeline: 'render -> conditional-decode -> prefill -> decode',
        request: 'POST /v1/chat/completions, stream:true, one 13-word user message, echo simulator (13 streamed tokens)',
        simulated_latency: {
          time_to_first_token_ms: args.ttftMs,
          inter_token_latency_ms: args.itlMs,
          applies_to: 'every simulator (prefill and decode alike)',
        },
        hit: 'a prompt whose prefix the decode simulator served before: the probe answer is streamed back (streamed_immediate_response)',
        miss: 'a new prompt: probe answered 412 by the decode simulator (EPP stand-in), then prefill, then decode via the public route',
        ttft: 'client side: request sent -> first read carrying SSE data',
        total: 'client side: request sent -> last byte',
        hit_prompts: args.hitPrompts,
        warmup: args.warmup,
        truncated_by_time: truncated,
      },
      ttft_ms: ttft,
      total_ms: total,
      errors: runner.errors,
      wrong_path: wrongPath,
    };
    mkdirSync(join(args.out, '..'), { recursive: true });
    writeFileSync(args.out, `${JSON.stringify(result, null, 2)}\n`);

    const row = (name: string, s: Summary) =>
      `  ${name.padEnd(10)} p50 ${s.p50.toFixed(3).padStart(9)} ms   p90 ${s.p90.toFixed(3).padStart(9)} ms   p99 ${s.p99.toFixed(3).padStart(9)} ms   (n=${s.n})`;
    process.stdout.write(`\nconditional (${args.bodyMode}), streaming:\n`);
    process.stdout.write(`${row('hit ttft', ttft.hit)}\n${row('miss ttft', ttft.miss)}\n`);
    process.stdout.write(`${row('hit total', total.hit)}\n${row('miss total', total.miss)}\n`);
    process.stdout.write(
      `  hit/miss: ttft p50 ${result.ratio_ttft_p50_hit_over_miss}x, total p50 ${result.ratio_total_p50_hit_over_miss}x\n`,
    );
    process.stdout.write(`wrote ${args.out}${truncated ? ' (stopped early: --max-seconds reached)' : ''}\n`);
    if (runner.errors > 0) throw new Error(`${runner.errors} request(s) failed; first: ${runner.firstError}`);
    if (wrongPath > 0) throw new Error(`${wrongPath} request(s) did not take the expected path (see ${stack.accessLogPath})`);
  } finally {
    await runner.close();
    await stack.stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${(err as Error).message}\n`);
  process.exit(1);
});
