/**
 * `npm run bench -- large-body`: what a large tokens-in body costs on the service path.
 *
 * One run starts the simulators, the coordinator and Envoy as separate processes on loopback, then,
 * for a 1 MB and a 20 MB `/inference/v1/generate` body (token ids + one image's kwargs_data, the
 * shape render produces for a 1080p image):
 * - direct:  client -> Envoy gateway listener (epp-profile: decode) -> decode simulator
 * - service: client -> Envoy public listener -> epd-coordinator (render, prefill via Envoy) -> decode
 * and, in this same process, Node's own JSON.parse + JSON.stringify of the same body: the floor any
 * service that rewrites the body pays once. Reports
 * - ratio_vs_parse_stringify = (service p50 - direct p50) / (parse + stringify p50), per size;
 * - own_ratio_vs_parse_stringify: the same, less the side calls' time (render + the prefill leg, in
 *   which a second worker receives and parses the body), read from the coordinator's step_ms;
 * - peak_rss_over_body = (the coordinator's peak RSS while serving - its idle RSS) / body size, for 20 MB.
 * Writes bench/results/large-body.json.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../launch/envoy-bootstrap';
import { parseBenchArgs, startBenchStack } from './args';
import { TestClient } from '../launch/client';
import { machineDescription, round3, summarize } from './stats';

const MB = 1_000_000;

function parseArgs(argv: readonly string[]) {
  return parseBenchArgs(argv, 'large-body', join(REPO_ROOT, 'bench', 'results', 'large-body.json'), {
    requests: { flag: 'requests', default: 12, min: 1, max: 1000 },
  });
}

/** A generate body of about `bytes`: 4096 token ids, one image whose kwargs_data fills the rest. */
function generateBody(bytes: number): string {
  const tokenIds = Array.from({ length: 4096 }, (_, i) => (i === 0 ? 1 : 100 + (i % 30_000)));
  for (let i = 8; i < 8 + 1024; i++) tokenIds[i] = 32000;
  const skeleton = {
    model: 'sim-model',
    token_ids: tokenIds,
    sampling_params: { max_tokens: 8 },
    features: {
      mm_hashes: { image: ['bench-image-0'] },
      mm_placeholders: { image: [{ offset: 8, length: 1024 }] },
      kwargs_data: { image: [''] },
    },
  };
  const fill = Math.max(0, bytes - JSON.stringify(skeleton).length);
  // Base64 text, as render's msgpack'd pixel tensors are.
  const kwargs = Buffer.alloc(Math.ceil((fill * 3) / 4), 0x5a)
    .toString('base64')
    .slice(0, fill);
  skeleton.features.kwargs_data.image[0] = kwargs;
  return JSON.stringify(skeleton);
}

function parseStringifyMs(body: string, runs: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint();
    const parsed = JSON.parse(body) as unknown;
    const text = JSON.stringify(parsed);
    if (text.length === 0) throw new Error('unreachable');
    out.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return out;
}

function procStatusKb(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no ${field} for pid ${pid}`);
  return Number(m[1]);
}

/**
 * The side-call time (sum of the coordinator's step_ms for render and prefill) of each request, from
 * the public listener's access-log lines; waits for Envoy to flush them.
 */
async function sideCallMs(accessLogPath: string, ids: readonly string[]): Promise<number[]> {
  const wanted = new Set(ids);
  for (let attempt = 0; ; attempt++) {
    const found = new Map<string, number>();
    for (const line of readFileSync(accessLogPath, 'utf8').split('\n')) {
      if (!line.includes('"listener":"public"')) continue;
      const entry = JSON.parse(line) as { x_request_id?: string; step_ms?: Record<string, number> | null };
      if (!entry.x_request_id || !wanted.has(entry.x_request_id)) continue;
      const steps = entry.step_ms ?? {};
      found.set(entry.x_request_id, (steps['render'] ?? 0) + (steps['prefill'] ?? 0));
    }
    if (found.size === wanted.size) return [...found.values()];
    if (attempt >= 50) throw new Error(`access log: found ${found.size} of ${wanted.size} requests`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const say = (msg: string) => process.stdout.write(`bench: ${msg}\n`);
  const stack = await startBenchStack('large-body', args, say);
  const service = new TestClient(stack.publicUrl);
  const direct = new TestClient(stack.gatewayUrl);
  const pid = stack.pids.find((p) => p.name === 'epd-coordinator')!.pid;
  const results: Record<string, unknown> = {};
  try {
    let seq = 0;
    const once = async (client: TestClient, body: string, headers?: Record<string, string>): Promise<number> => {
      const t0 = process.hrtime.bigint();
      const res = await client.post('/inference/v1/generate', body, { headers, timeoutMs: 120_000 });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${res.text.slice(0, 200)}`);
      return Number(process.hrtime.bigint() - t0) / 1e6;
    };
    // Warm both paths (JIT, connections) with a small body, then take the idle RSS.
    const small = generateBody(10_000);
    for (let i = 0; i < 20; i++) {
      await once(direct, small, { 'epp-profile': 'decode' });
      await once(service, small);
    }
    await new Promise((r) => setTimeout(r, 500));
    const idleRssKb = procStatusKb(pid, 'VmRSS');

    for (const [label, bytes] of [
      ['1mb', 1 * MB],
      ['20mb', 20 * MB],
    ] as const) {
      const body = generateBody(bytes);
      const runs = label === '1mb' ? args.requests * 3 : args.requests;
      say(`${label}: ${Buffer.byteLength(body)} bytes, ${runs} requests per setup, interleaved`);
      if (label === '20mb') writeFileSync(`/proc/${pid}/clear_refs`, '5'); // reset the peak-RSS mark
      const samples = { direct: [] as number[], service: [] as number[] };
      const ids: string[] = [];
      for (let i = 0; i < runs; i++) {
        const order = i % 2 === 0 ? (['direct', 'service'] as const) : (['service', 'direct'] as const);
        for (const s of order) {
          if (s === 'direct') samples.direct.push(await once(direct, body, { 'epp-profile': 'decode' }));
          else {
            const id = `bench-${label}-${++seq}`;
            ids.push(id);
            samples.service.push(await once(service, body, { 'x-request-id': id }));
          }
        }
      }
      const legs = summarize(await sideCallMs(stack.accessLogPath, ids));
      const peakKb = label === '20mb' ? procStatusKb(pid, 'VmHWM') : undefined;
      const ps = summarize(parseStringifyMs(body, Math.max(5, runs)));
      const d = summarize(samples.direct);
      const sv = summarize(samples.service);
      const added = sv.p50 - d.p50;
      results[label] = {
        body_bytes: Buffer.byteLength(body),
        p50_ms: { direct: d.p50, service: sv.p50, parse_stringify: ps.p50 },
        p99_ms: { direct: d.p99, service: sv.p99 },
        added_p50_ms: round3(added),
        ratio_vs_parse_stringify: round3(added / ps.p50),
        // The cascade's own cost: render and the prefill leg (a second worker receives and parses
        // the whole body through Envoy), from the coordinator's step_ms in the access log. What is
        // left of the added latency is the coordinator's: the body in, parse, serialise, body out.
        side_calls_p50_ms: legs.p50,
        own_added_p50_ms: round3(added - legs.p50),
        own_ratio_vs_parse_stringify: round3((added - legs.p50) / ps.p50),
        ...(peakKb !== undefined ? { idle_rss_mb: round3(idleRssKb / 1024), peak_rss_mb: round3(peakKb / 1024) } : {}),
      };
      say(
        `${label}: direct p50 ${d.p50} ms, service p50 ${sv.p50} ms, added ${round3(added)} ms, parse+stringify p50 ${ps.p50} ms -> ratio ${round3(added / ps.p50)}`,
      );
      say(
        `${label}: of the added, side calls (render + prefill leg) p50 ${legs.p50} ms; the coordinator's own ${round3(added - legs.p50)} ms -> ratio ${round3((added - legs.p50) / ps.p50)}`,
      );
      if (peakKb !== undefined) {
        const over = ((peakKb - idleRssKb) * 1024) / Buffer.byteLength(body);
        (results[label] as Record<string, unknown>)['peak_rss_over_body'] = round3(over);
        say(
          `${label}: coordinator idle RSS ${round3(idleRssKb / 1024)} MiB, peak ${round3(peakKb / 1024)} MiB -> growth/body ${round3(over)}`,
        );
      }
    }
  } finally {
    await Promise.all([service.close(), direct.close()]);
    await stack.stop();
  }
  const big = results['20mb'] as Record<string, number>;
  const out = {
    suite: 'large-body',
    body_mode: args.bodyMode,
    ratio_vs_parse_stringify: big['ratio_vs_parse_stringify'],
    own_ratio_vs_parse_stringify: big['own_ratio_vs_parse_stringify'],
    peak_rss_over_body: big['peak_rss_over_body'],
    sizes: results,
    date: new Date().toISOString(),
    machine: machineDescription(),
  };
  mkdirSync(join(args.out, '..'), { recursive: true });
  writeFileSync(args.out, `${JSON.stringify(out, null, 2)}\n`);
  say(`wrote ${args.out}`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench large-body: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
