/**
 * `npm run bench` (suite `spine`): what the coordinator's cascade costs on top of plain Envoy.
 *
 * One run starts simulators, the coordinator and Envoy as separate processes on loopback, then
 * sends the same non-streaming chat request two ways, interleaved so both share machine noise:
 * - direct:  client -> Envoy gateway listener (epp-profile: decode) -> decode simulator
 * - service: client -> Envoy public listener -> epd-coordinator (render, prefill via Envoy) -> decode simulator
 * Prints p50/p99 of each and their ratio; writes bench/results/spine.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../launch/envoy-bootstrap';
import { parseBenchArgs, startBenchStack } from './args';
import { at, TestClient } from '../launch/client';
import { machineDescription, round3, summarize, type Summary } from './stats';

type Setup = 'direct' | 'service';

const INTS = {
  requests: { flag: 'requests', default: 400, min: 1, max: 100_000 },
  warmup: { flag: 'warmup', default: 50, min: 0, max: 10_000 },
  concurrency: { flag: 'concurrency', default: 8, min: 0, max: 256, note: '0 = skip' },
  concurrentRequests: { flag: 'concurrent-requests', default: 400, min: 1, max: 100_000 },
  maxSeconds: { flag: 'max-seconds', default: 240, min: 1, max: 3600 },
} as const;

function parseArgs(argv: readonly string[]) {
  return parseBenchArgs(argv, 'spine', join(REPO_ROOT, 'bench', 'results', 'spine.json'), INTS);
}

const PROMPT = 'Summarise the benefits of disaggregated prefill and decode in two sentences.';
const BODY = JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: PROMPT }], max_tokens: 64 });

class Runner {
  errors = 0;
  firstError = '';
  private readonly direct: TestClient;
  private readonly service: TestClient;

  constructor(publicUrl: string, gatewayUrl: string) {
    this.service = new TestClient(publicUrl);
    this.direct = new TestClient(gatewayUrl);
  }

  /** One request; returns its latency in ms (headers sent to the last body byte read). */
  async once(setup: Setup): Promise<number> {
    const client = setup === 'direct' ? this.direct : this.service;
    const headers = setup === 'direct' ? { 'epp-profile': 'decode' } : undefined;
    const t0 = process.hrtime.bigint();
    let ok = false;
    let detail = '';
    try {
      const res = await client.post('/v1/chat/completions', BODY, { headers, timeoutMs: 30_000 });
      ok = res.status === 200 && at(res.json, 'choices', 0, 'message', 'content') === PROMPT;
      if (!ok) detail = `${setup}: HTTP ${res.status} ${res.text.slice(0, 200)}`;
    } catch (err) {
      detail = `${setup}: ${(err as Error).message}`;
    }
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (!ok) {
      this.errors++;
      this.firstError ||= detail;
    }
    return ms;
  }

  async close(): Promise<void> {
    await Promise.all([this.direct.close(), this.service.close()]);
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const say = (msg: string) => process.stdout.write(`bench: ${msg}\n`);
  const deadline = Date.now() + args.maxSeconds * 1000;
  const stack = await startBenchStack('spine', args, say);
  const stopOnSignal = () => void stack.stop().then(() => process.exit(130));
  process.once('SIGINT', stopOnSignal);
  process.once('SIGTERM', stopOnSignal);
  const runner = new Runner(stack.publicUrl, stack.gatewayUrl);
  let truncated = false;

  try {
    say(`warm-up: ${args.warmup} requests per setup`);
    for (let i = 0; i < args.warmup; i++) {
      await runner.once('direct');
      await runner.once('service');
    }
    if (runner.errors > 0) throw new Error(`warm-up failed: ${runner.firstError}`);

    say(`sequential: ${args.requests} requests per setup, interleaved`);
    const seq: Record<Setup, number[]> = { direct: [], service: [] };
    for (let i = 0; i < args.requests; i++) {
      if (Date.now() > deadline) {
        truncated = true;
        break;
      }
      // Alternate which setup goes first, so neither always follows the other.
      const order: Setup[] = i % 2 === 0 ? ['direct', 'service'] : ['service', 'direct'];
      for (const s of order) seq[s].push(await runner.once(s));
    }

    const conc: Record<Setup, { samples: number[]; wallMs: number }> = {
      direct: { samples: [], wallMs: 0 },
      service: { samples: [], wallMs: 0 },
    };
    if (args.concurrency > 0 && args.concurrentRequests > 0 && !truncated) {
      say(`concurrent: ${args.concurrentRequests} requests per setup at concurrency ${args.concurrency}, in alternating blocks`);
      const block = Math.max(args.concurrency * 5, 20);
      let turn = 0;
      while (
        (conc.direct.samples.length < args.concurrentRequests || conc.service.samples.length < args.concurrentRequests) &&
        !truncated
      ) {
        const s: Setup = turn++ % 2 === 0 ? 'direct' : 'service';
        const target = Math.min(block, args.concurrentRequests - conc[s].samples.length);
        if (target <= 0) continue;
        let issued = 0;
        const t0 = Date.now();
        const worker = async () => {
          while (issued < target) {
            issued++;
            conc[s].samples.push(await runner.once(s));
          }
        };
        await Promise.all(Array.from({ length: args.concurrency }, worker));
        conc[s].wallMs += Date.now() - t0;
        if (Date.now() > deadline) truncated = true;
      }
    }

    const direct = summarize(seq.direct);
    const service = summarize(seq.service);
    const concurrent =
      conc.direct.samples.length > 0 && conc.service.samples.length > 0
        ? {
            concurrency: args.concurrency,
            requests: Math.min(conc.direct.samples.length, conc.service.samples.length),
            direct: { ...summarize(conc.direct.samples), rps: round3((conc.direct.samples.length * 1000) / conc.direct.wallMs) },
            service: { ...summarize(conc.service.samples), rps: round3((conc.service.samples.length * 1000) / conc.service.wallMs) },
          }
        : null;
    const result = {
      suite: 'spine',
      p50_ms: { direct: direct.p50, service: service.p50 },
      p99_ms: { direct: direct.p99, service: service.p99 },
      ratio_p50: round3(service.p50 / direct.p50),
      ratio_p99: round3(service.p99 / direct.p99),
      requests: Math.min(direct.n, service.n),
      date: new Date().toISOString(),
      machine: machineDescription(['envoy 1.40.0 (--concurrency 1)']),
      setup: {
        body_mode: args.bodyMode,
        request: 'POST /v1/chat/completions, non-streaming, one short user message, echo simulator (no simulated latency)',
        direct: 'client -> Envoy gateway listener (epp-profile: decode) -> decode simulator',
        service: 'client -> Envoy public listener -> epd-coordinator ext_proc (render -> prefill via Envoy -> decode) -> decode simulator',
        warmup: args.warmup,
        truncated_by_time: truncated,
      },
      sequential: { direct, service },
      concurrent,
      errors: runner.errors,
    };
    mkdirSync(join(args.out, '..'), { recursive: true });
    writeFileSync(args.out, `${JSON.stringify(result, null, 2)}\n`);

    const row = (name: string, s: Summary) =>
      `  ${name.padEnd(8)} p50 ${s.p50.toFixed(3).padStart(8)} ms   p90 ${s.p90.toFixed(3).padStart(8)} ms   p99 ${s.p99.toFixed(3).padStart(8)} ms   (n=${s.n})`;
    process.stdout.write(`\nspine (${args.bodyMode}), sequential:\n${row('direct', direct)}\n${row('service', service)}\n`);
    process.stdout.write(`  ratio service/direct: p50 ${result.ratio_p50}x, p99 ${result.ratio_p99}x\n`);
    if (concurrent) {
      process.stdout.write(`concurrency ${concurrent.concurrency}:\n${row('direct', concurrent.direct)}  ${concurrent.direct.rps} req/s\n`);
      process.stdout.write(`${row('service', concurrent.service)}  ${concurrent.service.rps} req/s\n`);
    }
    process.stdout.write(`wrote ${args.out}${truncated ? ' (stopped early: --max-seconds reached)' : ''}\n`);
    if (runner.errors > 0) throw new Error(`${runner.errors} request(s) failed; first: ${runner.firstError}`);
  } finally {
    await runner.close();
    await stack.stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${(err as Error).message}\n`);
  process.exit(1);
});
