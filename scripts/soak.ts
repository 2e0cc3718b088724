/**
 * `npm run soak -- --minutes N`: a long run of mixed traffic at about half of the measured peak,
 * reporting errors and the RSS slope of the service process. Not part of CI.
 *
 * Everything runs on 127.0.0.1 with free ports: four simulators (in this process), the coordinator
 * (its own process, so its memory is measured alone) and Envoy. The run first measures the peak
 * (closed loop, rising concurrency), then drives an open-loop rate of half of it.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { REPO_ROOT, type EnvoyBodyMode } from '../launch/envoy-bootstrap';
import { startChild, type Child } from '../launch/supervise';
import { startSimulator, type Simulator } from '../sim/simulator';
import { TestClient } from '../launch/client';
import { startEnvoy, type EnvoyHandle } from '../launch/envoy';
import { freePort } from '../launch/ports';

interface Args {
  minutes: number;
  bodyMode: EnvoyBodyMode;
  out: string;
  /** Requests per second; 0 = half of the measured peak. */
  rate: number;
  /** `max_requests_per_connection` of Envoy's coordinator cluster; 0 = none (a stock Envoy, the default). */
  streamCap: number;
}

/** Marks "no --out given": the report then goes to the run's own directory. */
const DEFAULT_OUT = '';

const USAGE = `usage: npm run soak -- [--minutes N (10)] [--rate RPS (0 = half of the measured peak)] [--buffered] [--stream-cap N (0 = none)] [--out FILE]`;

function parseArgs(argv: string[]): Args {
  const args: Args = { minutes: 10, bodyMode: 'full_duplex', out: DEFAULT_OUT, rate: 0, streamCap: 0 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const num = (max: number): number => {
      const n = Number(argv[++i]);
      if (!Number.isFinite(n) || n < 0 || n > max) throw new Error(`${a}: expected a number 0-${max}\n${USAGE}`);
      return n;
    };
    switch (a) {
      case '--minutes':
        args.minutes = Math.max(0.1, num(24 * 60));
        break;
      case '--rate':
        args.rate = num(100_000);
        break;
      case '--buffered':
        args.bodyMode = 'buffered';
        break;
      case '--stream-cap':
        args.streamCap = Math.floor(num(1_000_000));
        break;
      case '--out':
        args.out = argv[++i] ?? args.out;
        break;
      case '-h':
      case '--help':
        process.stdout.write(`${USAGE}\n`);
        return process.exit(0);
      default:
        throw new Error(`unknown argument ${a}\n${USAGE}`);
    }
  }
  return args;
}

const PNG = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

/** The traffic mix: [weight, path, body]. */
const MIX: Array<[number, string, (i: number) => unknown]> = [
  [
    40,
    '/v1/chat/completions',
    (i) => ({ model: 'sim-model', messages: [{ role: 'user', content: `question ${i} about soak testing` }], max_tokens: 8 }),
  ],
  [
    20,
    '/v1/chat/completions',
    (i) => ({ model: 'sim-model', stream: true, messages: [{ role: 'user', content: `stream ${i} please` }], max_tokens: 8 }),
  ],
  [15, '/v1/completions', (i) => ({ model: 'sim-model', prompt: `complete number ${i}`, max_tokens: 8 })],
  [10, '/v1/completions', (i) => ({ model: 'sim-model', prompt: [1, 2, 3, (i % 1000) + 4], max_tokens: 4 })],
  [10, '/inference/v1/generate', (i) => ({ model: 'sim-model', token_ids: [1, 2, 3, (i % 1000) + 4], sampling_params: { max_tokens: 4 } })],
  [
    5,
    '/v1/chat/completions',
    (i) => ({
      model: 'sim-model',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: `image ${i}` },
            { type: 'image_url', image_url: { url: PNG } },
          ],
        },
      ],
      max_tokens: 4,
    }),
  ],
];
const TOTAL_WEIGHT = MIX.reduce((n, [w]) => n + w, 0);

function pick(i: number): { path: string; body: unknown } {
  let r = (i * 7919) % TOTAL_WEIGHT;
  for (const [w, path, body] of MIX) {
    if (r < w) return { path, body: body(i) };
    r -= w;
  }
  throw new Error('unreachable');
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Least-squares slope of y over x. */
function slope(points: ReadonlyArray<{ x: number; y: number }>): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.x - mx) * (p.y - my);
    den += (p.x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

const say = (msg: string): void => void process.stdout.write(`[soak] ${msg}\n`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

class Tally {
  readonly byStatus = new Map<string, number>();
  ok = 0;
  total = 0;
  add(status: number | string): void {
    this.total++;
    if (status === 200) this.ok++;
    const k = String(status);
    this.byStatus.set(k, (this.byStatus.get(k) ?? 0) + 1);
  }
}

async function send(client: TestClient, i: number, tally: Tally): Promise<void> {
  const { path, body } = pick(i);
  try {
    tally.add((await client.post(path, body, { timeoutMs: 30_000 })).status);
  } catch (err) {
    tally.add(`error:${(err as Error).name}`);
  }
}

/** Closed loop at `concurrency` for `ms`: completed requests per second. */
async function throughput(client: TestClient, concurrency: number, ms: number, start: number): Promise<number> {
  const tally = new Tally();
  const end = performance.now() + ms;
  let i = start;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) await send(client, i++, tally);
    }),
  );
  return tally.ok / (ms / 1000);
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  // One directory per run: two soaks (or a soak and a bench) never share or delete each other's files.
  const dir = join(REPO_ROOT, '.cache', 'soak', `run-${new Date().toISOString().replace(/[:.]/g, '-')}-${process.pid}`);
  mkdirSync(dir, { recursive: true });
  if (args.out === DEFAULT_OUT) args.out = join(dir, 'report.json');
  const sims: Simulator[] = [];
  let service: Child | undefined;
  let envoy: EnvoyHandle | undefined;
  const stop = async (): Promise<void> => {
    await envoy?.stop();
    await service?.stop(5000);
    await Promise.all(sims.map((s) => s.close()));
  };
  process.once('SIGINT', () => void stop().then(() => process.exit(130)));

  try {
    for (const role of ['render', 'encode', 'prefill', 'decode'] as const) {
      sims.push(
        await startSimulator({
          name: `sim-${role}-0`,
          role,
          interTokenLatencyMs: 2,
          maxRecordedRequests: 100,
          maxRecordedBytes: 8 * 1024 * 1024,
        }),
      );
    }
    const [render, encode, prefill, decode] = sims as [Simulator, Simulator, Simulator, Simulator];
    const gatewayPort = await freePort();
    const extProcPort = await freePort();
    const configPath = join(dir, 'coordinator.yaml');
    writeFileSync(
      configPath,
      yaml.dump({
        log_level: 2,
        server: { listen_addr: `127.0.0.1:${extProcPort}`, metrics_addr: '127.0.0.1:0', shutdown_timeout: '5s' },
        gateway: { address: `http://127.0.0.1:${gatewayPort}`, timeout: '30s' },
        pipeline: {
          kv_connector: 'kv-nixl',
          steps: [
            { type: 'replace-media-urls', params: { allowed_domains: ['127.0.0.1'] } },
            { type: 'render', params: { address: render.url } },
            { type: 'encode' },
            { type: 'prefill' },
            { type: 'decode' },
          ],
        },
      }),
    );
    service = await startChild({
      name: 'epd-coordinator',
      command: process.execPath,
      args: ['--import', 'tsx', join(REPO_ROOT, 'src/main.ts'), '--config', configPath],
      cwd: REPO_ROOT,
      logPath: join(dir, 'coordinator.log'),
      ready: /"msg":"epd-coordinator listening"/,
      readyTimeoutMs: 60_000,
    });
    envoy = await startEnvoy({
      dir: join(dir, 'envoy'),
      flushIntervalMs: 1000,
      bootstrap: {
        bodyMode: args.bodyMode,
        gatewayPort,
        extProcAddress: `127.0.0.1:${extProcPort}`,
        encodeAddress: `127.0.0.1:${encode.port}`,
        prefillAddress: `127.0.0.1:${prefill.port}`,
        decodeAddress: `127.0.0.1:${decode.port}`,
        accessLogPath: join(dir, 'access.log'),
        // Like a stock Envoy by default: the coordinator takes Envoy's per-stream resets itself.
        extProcStreamCap: args.streamCap,
      },
    });
    const client = new TestClient(envoy.publicUrl);
    say(
      `stack up on node ${process.version}: envoy ${envoy.publicUrl}, coordinator pid ${service.pid}, coordinator stream cap ${args.streamCap || 'none'}`,
    );

    let rate = args.rate;
    let peak = 0;
    if (rate === 0) {
      let i = 0;
      for (const c of [1, 2, 4, 8, 16, 32]) {
        const rps = await throughput(client, c, 5000, (i += 100_000));
        say(`peak probe: concurrency ${c} -> ${rps.toFixed(1)} req/s`);
        if (rps <= peak * 1.05) {
          peak = Math.max(peak, rps);
          break;
        }
        peak = Math.max(peak, rps);
      }
      rate = Math.max(1, peak / 2);
    }
    say(`driving ${rate.toFixed(1)} req/s (half of peak ${peak.toFixed(1)}) for ${args.minutes} min`);

    const tally = new Tally();
    const samples: Array<{ t: number; rssMb: number; inFlight: number }> = [];
    const started = performance.now();
    const endAt = started + args.minutes * 60_000;
    let inFlight = 0;
    let n = 0;
    const maxInFlight = 512;
    const pending = new Set<Promise<void>>();
    const sampleEveryMs = Math.min(10_000, Math.max(1000, (args.minutes * 60_000) / 120));
    let nextSample = started;
    while (performance.now() < endAt) {
      const now = performance.now();
      if (now >= nextSample) {
        samples.push({ t: (now - started) / 60_000, rssMb: rssMb(service.pid), inFlight });
        nextSample += sampleEveryMs;
        if (samples.length % 6 === 0)
          say(
            `${((now - started) / 60_000).toFixed(1)} min: ${tally.total} sent, ${tally.total - tally.ok} failed, rss ${samples[samples.length - 1]!.rssMb.toFixed(1)} MB`,
          );
      }
      const due = Math.floor(((now - started) / 1000) * rate);
      while (n < due && inFlight < maxInFlight) {
        inFlight++;
        const p = send(client, n++, tally).finally(() => {
          inFlight--;
          pending.delete(p);
        });
        pending.add(p);
      }
      await sleep(5);
    }
    await Promise.all(pending);
    samples.push({ t: (performance.now() - started) / 60_000, rssMb: rssMb(service.pid), inFlight: 0 });
    await client.close();

    // The first tenth is warm-up (JIT, pools, caches); the slope is over the rest.
    const steady = samples.filter((s) => s.t >= args.minutes * 0.1);
    const cx = await envoy.stats('cluster.epd_coordinator.upstream_cx_');
    const extProc = await envoy.stats('http.public.ext_proc.streams_failed');
    const resets = await envoy.stats('cluster.epd_coordinator.http2.tx_reset');
    const workers = await envoy.stats('_workers.upstream_');
    const sumOf = (suffix: string): number =>
      Object.entries(workers)
        .filter(([k]) => k.endsWith(suffix))
        .reduce((sum, [, v]) => sum + v, 0);
    const report = {
      node: process.version,
      streamCap: args.streamCap,
      coordinatorConnections: cx['cluster.epd_coordinator.upstream_cx_total'] ?? 0,
      coordinatorProtocolErrors: cx['cluster.epd_coordinator.upstream_cx_protocol_error'] ?? 0,
      extProcStreamsFailed: extProc['http.public.ext_proc.streams_failed'] ?? 0,
      // 0 with graceful ext_proc close; one per request without it.
      coordinatorStreamResets: resets['cluster.epd_coordinator.http2.tx_reset'] ?? 0,
      // The keep-alive race: a worker closed a connection under a request (0 with the idle timeout).
      workerClosesUnderRequest: sumOf('.upstream_cx_destroy_remote_with_active_rq'),
      workerIdleCloses: sumOf('.upstream_cx_idle_timeout'),
      workerRetries: sumOf('.upstream_rq_retry'),
      minutes: args.minutes,
      bodyMode: args.bodyMode,
      peakRps: Number(peak.toFixed(1)),
      rateRps: Number(rate.toFixed(1)),
      requests: tally.total,
      ok: tally.ok,
      errors: tally.total - tally.ok,
      byStatus: Object.fromEntries(tally.byStatus),
      rssStartMb: Number(samples[0]!.rssMb.toFixed(1)),
      rssSteadyStartMb: Number((steady[0] ?? samples[0]!).rssMb.toFixed(1)),
      rssEndMb: Number(samples[samples.length - 1]!.rssMb.toFixed(1)),
      rssSlopeMbPerMin: Number(slope(steady.map((s) => ({ x: s.t, y: s.rssMb }))).toFixed(3)),
      samples,
    };
    mkdirSync(join(args.out, '..'), { recursive: true });
    writeFileSync(args.out, JSON.stringify(report, null, 2));
    const { samples: _omit, ...summary } = report;
    say(`done: ${JSON.stringify(summary)}`);
    say(`report: ${args.out}`);
    process.exitCode = report.errors > 0 ? 1 : 0;
  } finally {
    await stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`soak: ${(err as Error).message}\n`);
  process.exit(2);
});
