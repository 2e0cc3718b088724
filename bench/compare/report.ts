/** The compare run's summary table (printed at the end, and the README's source). */
import { SETUPS, type Setup } from './stack';
import type { PhaseResult, SetupResult } from './run';

const f = (n: number | null | undefined): string =>
  n === null || n === undefined || Number.isNaN(n) ? '-' : String(Math.round(n * 100) / 100);
const ratio = (a: number | null | undefined, b: number | null | undefined): string => (a && b ? (a / b).toFixed(2) : '-');

/**
 * One row per case and figure, one column per setup, and ours/Go; with the bare Node coordinator
 * (chat cases), its column and node/Go too: a target below node/Go is out of Node's reach.
 */
export function markdownTable(topology: string, phases: readonly PhaseResult[]): string {
  const node = phases.some((p) => Object.values(p.cases).some((c) => c.node));
  const head = node ? ' Node floor | ours / Go | Node floor / Go |' : ' ours / Go |';
  const rows = [`| ${topology}: case | figure | floor | ours | Go |${head}`, `|---|---|---|---|---|---|${node ? '---|---|' : ''}`];
  /** One figure of every setup, with ours/Go (and node/Go) beside it. */
  const row = (name: string, label: string, v: Partial<Record<Setup, number | null | undefined>>): void => {
    const tail = node ? ` ${f(v.node)} | ${ratio(v.ours, v.go)} | ${ratio(v.node, v.go)} |` : ` ${ratio(v.ours, v.go)} |`;
    rows.push(`| ${name} | ${label} | ${f(v.floor)} | ${f(v.ours)} | ${f(v.go)} |${tail}`);
  };
  for (const phase of phases) {
    for (const [name, r] of Object.entries(phase.cases)) {
      const fig = (label: string, pick: (x: SetupResult) => number | null | undefined) =>
        row(name, label, Object.fromEntries(SETUPS.map((s) => [s, r[s] && pick(r[s])])));
      if (r.floor.ttft) {
        fig('TTFT p50 ms', (x) => x.ttft?.p50);
        fig('TTFT added p50 ms', (x) => x.added_ms?.ttft_p50);
        fig('TTFT added p99 ms', (x) => x.added_ms?.ttft_p99);
      }
      fig('p50 ms', (x) => x.total.p50);
      fig('added p50 ms', (x) => x.added_ms?.p50);
      fig('added p99 ms', (x) => x.added_ms?.p99);
      fig('req/s', (x) => x.rps);
      fig('service CPU ms/req', (x) => x.service_cpu_ms_per_request);
      fig('system CPU ms/req', (x) => x.system_cpu_ms_per_request);
    }
    const w = phase.warmup_service_cpu_ms_per_request;
    if (w) row('warm-up of the phase', 'service CPU ms/req', w);
    const last = Object.values(phase.memory.after_case).at(-1);
    if (last) row('memory after the phase', 'RSS MB', { ours: last.ours_rss_mb, go: last.go_rss_mb, node: last.node_rss_mb });
  }
  return rows.join('\n');
}
