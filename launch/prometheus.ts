/**
 * A real Prometheus on loopback (Debian's package, unpacked into .tools/prometheus by
 * scripts/install-prometheus.sh) that scrapes the coordinator's /metrics and evaluates the shipped
 * alert rules; and the queries the dashboard tests and the dashboard drawing ask it, over its HTTP API.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import { REPO_ROOT } from './envoy-bootstrap';
import { freePort } from './ports';
import { startChild, type Child } from './supervise';

export const PROMETHEUS_DIR = join(REPO_ROOT, '.tools/prometheus/bin');
export const PROMETHEUS_BIN = join(PROMETHEUS_DIR, 'prometheus');
export const PROMTOOL_BIN = join(PROMETHEUS_DIR, 'promtool');
export const OBSERVABILITY_DIR = join(REPO_ROOT, 'config/observability');
export const ALERT_RULES_FILE = join(OBSERVABILITY_DIR, 'alert-rules.yaml');
export const DASHBOARD_FILE = join(OBSERVABILITY_DIR, 'grafana-dashboard.json');

/** Why the Prometheus tests cannot run, or undefined when they can. */
export function prometheusMissing(): string | undefined {
  for (const bin of [PROMETHEUS_BIN, PROMTOOL_BIN]) {
    if (!existsSync(bin)) return `${bin} is absent; run scripts/install-prometheus.sh`;
  }
  return undefined;
}

export interface ScrapeTarget {
  readonly job: string;
  /** host:port of a /metrics listener. */
  readonly address: string;
}

export interface PrometheusOptions {
  readonly dir: string;
  readonly targets: readonly ScrapeTarget[];
  /** Scrape and rule-evaluation interval, seconds. Default 1. */
  readonly intervalSeconds?: number;
  readonly ruleFiles?: readonly string[];
}

/** One series of an instant or range query. */
export interface Series {
  readonly metric: Record<string, string>;
  /** [unix seconds, value as Prometheus writes it ("NaN", "+Inf", "0.25")]. */
  readonly values: ReadonlyArray<readonly [number, string]>;
}

export interface ActiveAlert {
  readonly labels: Record<string, string>;
  readonly state: 'pending' | 'firing' | 'inactive';
}

export interface RuleHealth {
  readonly name: string;
  readonly health: string;
  readonly lastError?: string;
}

export interface PrometheusHandle {
  readonly url: string;
  readonly dir: string;
  /** Instant query at `time` (unix seconds; default now). */
  query(expr: string, time?: number): Promise<Series[]>;
  queryRange(expr: string, start: number, end: number, stepSeconds: number): Promise<Series[]>;
  /** Metric names Prometheus has stored. */
  metricNames(): Promise<string[]>;
  alerts(): Promise<ActiveAlert[]>;
  rules(): Promise<RuleHealth[]>;
  stop(): Promise<void>;
}

const QUERY_TIMEOUT_MS = 10_000;

interface ApiAnswer<T> {
  status: string;
  data: T;
  error?: string;
}

async function api<T>(base: string, path: string, params: Record<string, string> = {}): Promise<T> {
  const query = new URLSearchParams(params).toString();
  const res = await request(`${base}${path}${query ? `?${query}` : ''}`, { signal: AbortSignal.timeout(QUERY_TIMEOUT_MS) });
  const answer = (await res.body.json()) as ApiAnswer<T>;
  if (answer.status !== 'success') throw new Error(`prometheus ${path} ${JSON.stringify(params)}: ${answer.error ?? res.statusCode}`);
  return answer.data;
}

function configYaml(opts: PrometheusOptions): string {
  const interval = `${opts.intervalSeconds ?? 1}s`;
  const lines = ['global:', `  scrape_interval: ${interval}`, `  evaluation_interval: ${interval}`];
  if (opts.ruleFiles?.length) lines.push('rule_files:', ...opts.ruleFiles.map((f) => `  - ${JSON.stringify(f)}`));
  lines.push('scrape_configs:');
  for (const t of opts.targets) {
    lines.push(`  - job_name: ${JSON.stringify(t.job)}`, `    scrape_timeout: ${interval}`, '    static_configs:');
    lines.push(`      - targets: [${JSON.stringify(t.address)}]`);
  }
  return `${lines.join('\n')}\n`;
}

export async function startPrometheus(opts: PrometheusOptions): Promise<PrometheusHandle> {
  mkdirSync(opts.dir, { recursive: true });
  const configPath = join(opts.dir, 'prometheus.yml');
  writeFileSync(configPath, configYaml(opts));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child: Child = await startChild({
    name: 'prometheus',
    command: PROMETHEUS_BIN,
    args: [`--config.file=${configPath}`, `--storage.tsdb.path=${join(opts.dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
    logPath: join(opts.dir, 'prometheus.log'),
    ready: /Server is ready to receive web requests/,
    readyTimeoutMs: 30_000,
  });
  const base = `${url}/api/v1`;
  const matrix = (data: { result: Array<{ metric: Record<string, string>; values?: [number, string][]; value?: [number, string] }> }) =>
    data.result.map((r) => ({ metric: r.metric, values: r.values ?? (r.value ? [r.value] : []) }));
  return {
    url,
    dir: opts.dir,
    query: async (expr, time) => matrix(await api(base, '/query', { query: expr, ...(time !== undefined ? { time: String(time) } : {}) })),
    queryRange: async (expr, start, end, step) =>
      matrix(await api(base, '/query_range', { query: expr, start: String(start), end: String(end), step: String(step) })),
    metricNames: () => api<string[]>(base, '/label/__name__/values'),
    alerts: async () => (await api<{ alerts: ActiveAlert[] }>(base, '/alerts')).alerts,
    rules: async () => {
      const data = await api<{ groups: Array<{ rules: RuleHealth[] }> }>(base, '/rules');
      return data.groups.flatMap((g) => g.rules);
    },
    stop: () => child.stop(5000),
  };
}
