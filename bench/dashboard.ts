/**
 * `npm run bench -- dashboard`: draws the Grafana dashboard (config/observability/grafana-dashboard.json)
 * from a real traffic run, as docs/dashboard.svg.
 *
 * Starts the local stack as it ships (simulators, the built coordinator with the async broker,
 * conditional decode and selective disaggregation, Redis, the queue processor, Envoy) and a
 * Prometheus that scrapes the coordinator every second and evaluates the shipped alert rules. Then
 * `--concurrency` clients send a mix for `--seconds`: short and long prompts, repeated prompts (cache
 * hits), streams, async-broker enqueues and a few malformed bodies. For a stretch in the middle the
 * prefill simulator answers as the EPP does without a prefill endpoint (429
 * `rejected-saturated`, "no endpoints available"), and later it fails with 500s. Each panel's own
 * queries are then asked over the run as range queries (Grafana's `$__rate_interval` as
 * `--rate-seconds`) and drawn with echarts. The run's figures are printed; nothing is timed.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { REPO_ROOT } from '../launch/envoy-bootstrap';
import { ensureEnvoy } from '../launch/envoy';
import { buildService, freeStackPorts, startLocalStack, type LocalStack } from '../launch/local-stack';
import { freePort, sleep } from '../launch/ports';
import { ALERT_RULES_FILE, DASHBOARD_FILE, prometheusMissing, startPrometheus, type PrometheusHandle } from '../launch/prometheus';
import { withGrafanaVariables } from '../launch/promql';
import { parseBenchArgs } from './args';
import { dashboardSvg, linesOf, type DrawnPanel } from './dashboard-svg';

const INTS = {
  seconds: { flag: 'seconds', default: 90, min: 10, max: 3600 },
  concurrency: { flag: 'concurrency', default: 4, min: 1, max: 64 },
  rateSeconds: { flag: 'rate-seconds', default: 10, min: 2, max: 600 },
} as const;

const MODEL = 'sim-model';
const JOB = 'epd-coordinator';
/** The stretches of the run (fractions of it) with a prefill fault. */
const NO_ENDPOINT_PHASE = [0.3, 0.45] as const;
const WORKER_5XX_PHASE = [0.65, 0.72] as const;
const NO_ENDPOINT_RULE = {
  match: { profile: 'prefill' },
  status: 429,
  headers: { 'x-llm-d-request-dropped-reason': 'rejected-saturated' },
  body: 'inference error: ResourceExhausted - no endpoints available for the given request',
};
const WORKER_5XX_RULE = { match: { profile: 'prefill' }, status: 500, body: 'worker failed' };

interface DashboardPanelJson {
  type: string;
  title: string;
  fieldConfig?: { defaults?: { unit?: string } };
  targets?: Array<{ expr: string; legendFormat: string }>;
}

const words = (tag: string, n: number) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ');

class Traffic {
  readonly statuses = new Map<number, number>();
  private readonly agent = new Agent({ keepAliveTimeout: 10_000, connections: 64 });
  private seq = 0;

  constructor(private readonly url: string) {}

  /** One request of the mix, chosen by its sequence number. */
  async once(): Promise<void> {
    const i = ++this.seq;
    const kind = i % 20;
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-request-id': `bench-dash-${process.pid}-${i}` };
    let body: string;
    const chat = (content: string, more: Record<string, unknown> = {}) =>
      JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 16, ...more });
    if (kind < 6) body = chat(`short question ${i}`);
    else if (kind < 10) body = chat(words(`long${i}-`, 60));
    else if (kind < 14)
      body = chat(words(`shared${i % 8}-`, 60)); // repeats: cache hits once served
    else if (kind < 17) body = chat(words(`stream${i}-`, 60), { stream: true });
    else if (kind < 19) {
      body = chat(`queued ${i}`);
      headers['x-ap-mode'] = 'enqueue';
    } else body = '{"model": "sim-model", "messages": [';
    try {
      const res = await request(`${this.url}/v1/chat/completions`, {
        method: 'POST',
        dispatcher: this.agent,
        headers,
        body,
        signal: AbortSignal.timeout(30_000),
      });
      await res.body.text();
      this.statuses.set(res.statusCode, (this.statuses.get(res.statusCode) ?? 0) + 1);
    } catch {
      this.statuses.set(0, (this.statuses.get(0) ?? 0) + 1);
    }
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

async function setPrefillFaults(port: number, rules: readonly unknown[]): Promise<void> {
  const res = await request(`http://127.0.0.1:${port}/__sim/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(rules),
  });
  await res.body.text();
  if (res.statusCode !== 200) throw new Error(`setting prefill faults: HTTP ${res.statusCode}`);
}

async function drawPanels(prom: PrometheusHandle, start: number, end: number, rateSeconds: number): Promise<DrawnPanel[]> {
  const dash = JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8')) as { panels: DashboardPanelJson[] };
  const step = Math.max(1, Math.round((end - start) / 120));
  const out: DrawnPanel[] = [];
  for (const p of dash.panels.filter((x) => x.type === 'timeseries')) {
    const lines: DrawnPanel['lines'][number][] = [];
    for (const t of p.targets ?? []) {
      const series = await prom.queryRange(withGrafanaVariables(t.expr, `${rateSeconds}s`), start, end, step);
      lines.push(...linesOf(series, t.legendFormat));
    }
    out.push({ title: p.title, unit: p.fieldConfig?.defaults?.unit ?? 'short', lines });
  }
  return out;
}

async function main(): Promise<void> {
  const args = parseBenchArgs(process.argv.slice(2), 'dashboard', join(REPO_ROOT, 'docs', 'dashboard.svg'), INTS);
  const say = (msg: string) => process.stdout.write(`bench: ${msg}\n`);
  const missing = prometheusMissing();
  if (missing) throw new Error(`${missing} (Debian's prometheus package)`);
  const dir = join(REPO_ROOT, '.cache', 'bench-dashboard');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  ensureEnvoy();
  buildService(say);

  const ports = { ...(await freeStackPorts()), metrics: await freePort(), redis: await freePort() };
  let stack: LocalStack | undefined;
  let prom: PrometheusHandle | undefined;
  const stopAll = async () => {
    await prom?.stop().catch(() => undefined);
    await stack?.stop().catch(() => undefined);
  };
  process.once('SIGINT', () => void stopAll().then(() => process.exit(130)));
  process.once('SIGTERM', () => void stopAll().then(() => process.exit(143)));
  try {
    stack = await startLocalStack({
      dir,
      ports,
      bodyMode: args.bodyMode,
      kvConnector: 'kv-nixl',
      conditionalDecode: true,
      prefillParams: { min_prompt_tokens: 32, fallback_to_decode: true },
      simArgs: ['--time-to-first-token-ms', '40', '--inter-token-latency-ms', '3'],
      flushIntervalMs: 200,
      cpuProfileDir: args.cpuProfileDir,
      builtService: true,
      say,
    });
    prom = await startPrometheus({
      dir: join(dir, 'prometheus'),
      targets: [{ job: JOB, address: `127.0.0.1:${ports.metrics}` }],
      ruleFiles: [ALERT_RULES_FILE],
    });
    say(`prometheus on ${prom.url}, scraping 127.0.0.1:${ports.metrics} every second`);
    await sleep(3000);

    const run = new Traffic(stack.publicUrl);
    const start = Date.now();
    const until = start + args.seconds * 1000;
    let phase = '';
    const phaseAt = (now: number): string => {
      const f = (now - start) / (until - start);
      if (f >= NO_ENDPOINT_PHASE[0] && f < NO_ENDPOINT_PHASE[1]) return 'no-endpoint';
      if (f >= WORKER_5XX_PHASE[0] && f < WORKER_5XX_PHASE[1]) return 'worker-5xx';
      return 'healthy';
    };
    say(`traffic: ${args.concurrency} clients for ${args.seconds} s`);
    await Promise.all(
      Array.from({ length: args.concurrency }, async (_, w) => {
        while (Date.now() < until) {
          if (w === 0) {
            const now = phaseAt(Date.now());
            if (now !== phase) {
              phase = now;
              say(`phase: ${phase}`);
              await setPrefillFaults(
                ports.prefill,
                phase === 'no-endpoint' ? [NO_ENDPOINT_RULE] : phase === 'worker-5xx' ? [WORKER_5XX_RULE] : [],
              );
            }
          }
          await run.once();
        }
      }),
    );
    await run.close();
    await sleep(4000); // the last scrapes
    const end = Date.now();

    const panels = await drawPanels(prom, Math.floor(start / 1000) - 5, Math.ceil(end / 1000), args.rateSeconds);
    const sent = [...run.statuses.values()].reduce((a, b) => a + b, 0);
    const byStatus = [...run.statuses.entries()].sort(([a], [b]) => a - b).map(([s, n]) => `${s === 0 ? 'failed' : s}: ${n}`);
    const subtitle =
      `npm run bench -- dashboard --seconds ${args.seconds} --concurrency ${args.concurrency}: ${sent} requests (${byStatus.join(', ')}); ` +
      `prefill answers "no endpoint" at ${NO_ENDPOINT_PHASE.map((f) => `${f * 100}%`).join('-')} of the run and 500 at ` +
      `${WORKER_5XX_PHASE.map((f) => `${f * 100}%`).join('-')}; rate window ${args.rateSeconds}s, scrape 1s.`;
    mkdirSync(join(args.out, '..'), { recursive: true });
    writeFileSync(args.out, dashboardSvg('epd-coordinator dashboard (config/observability/grafana-dashboard.json)', subtitle, panels));
    const empty = panels.filter((p) => p.lines.every((l) => l.points.length === 0)).map((p) => p.title);
    say(`requests: ${sent} (${byStatus.join(', ')})`);
    say(`wrote ${args.out}: ${panels.length} panels${empty.length ? `; without data: ${empty.join(', ')}` : ''}`);
  } finally {
    await stopAll();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench dashboard failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
