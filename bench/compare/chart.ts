/**
 * The compare run as an SVG (echarts, server-side: no DOM, no native modules): for each topology,
 * box plots of the latency of floor, ours and Go side by side, per case. Whiskers are p1 and p99,
 * the box p25-p75, the line the median.
 */
import * as echarts from 'echarts';
import type { PhaseResult, SetupResult } from './run';
import { SETUPS } from './stack';

interface Panel {
  readonly title: string;
  readonly phase: 'fast' | 'realistic';
  readonly cases: readonly string[];
  readonly pick: (r: SetupResult) => readonly number[] | undefined;
}

const PANELS: readonly Panel[] = [
  {
    title: 'non-streaming, zero-latency workers: whole response (ms)',
    phase: 'fast',
    cases: ['nonstream_c1_fast', 'nonstream_c8_fast', 'nonstream_c32_fast'],
    pick: (r) => r.total.box,
  },
  {
    title: 'non-streaming, realistic workers: whole response (ms)',
    phase: 'realistic',
    cases: ['nonstream_c1_realistic', 'nonstream_c8_realistic', 'nonstream_c32_realistic'],
    pick: (r) => r.total.box,
  },
  {
    title: 'streaming, realistic workers: time to first byte (ms)',
    phase: 'realistic',
    cases: ['stream_c1_realistic', 'stream_c8_realistic', 'stream_c32_realistic'],
    pick: (r) => r.ttft?.box,
  },
  {
    title: 'streaming, realistic workers: whole response (ms)',
    phase: 'realistic',
    cases: ['stream_c1_realistic', 'stream_c8_realistic', 'stream_c32_realistic'],
    pick: (r) => r.total.box,
  },
];

// node: the bare Node coordinator, the floor of any Node service (chat cases).
const COLORS = { floor: '#8c8c8c', ours: '#2f7ed8', go: '#d9822b', node: '#3a9d5d' } as const;

export interface ChartInput {
  readonly topology: string;
  readonly phases: { readonly fast?: PhaseResult; readonly realistic?: PhaseResult };
}

/** The SVG text; topologies side by side (columns), one panel per row. */
export function renderCompareChart(inputs: readonly ChartInput[], subtitle: string): string {
  const colW = 620;
  const rowH = 300;
  const top = 90;
  const width = colW * inputs.length + 40;
  const height = top + rowH * PANELS.length + 20;
  const grid: object[] = [];
  const xAxis: object[] = [];
  const yAxis: object[] = [];
  const series: object[] = [];
  const title: object[] = [{ text: 'epd-coordinator vs the Go coordinator: latency distributions', subtext: subtitle, left: 20, top: 8 }];
  inputs.forEach((input, col) => {
    PANELS.forEach((panel, row) => {
      const phase = input.phases[panel.phase];
      const present = panel.cases.filter((c) => phase?.cases[c] && panel.pick(phase.cases[c].floor));
      const i = grid.length;
      const left = 20 + col * colW + 60;
      const y = top + row * rowH + 30;
      grid.push({ left, top: y, width: colW - 100, height: rowH - 90 });
      title.push({ text: `${input.topology}: ${panel.title}`, left: left - 50, top: y - 26, textStyle: { fontSize: 13 } });
      xAxis.push({ type: 'category', gridIndex: i, data: present.map((c) => c.replace(/_(fast|realistic)$/, '')) });
      yAxis.push({ type: 'value', gridIndex: i, scale: true, splitLine: { lineStyle: { color: '#eee' } } });
      for (const s of SETUPS) {
        series.push({
          name: s,
          type: 'boxplot',
          xAxisIndex: i,
          yAxisIndex: i,
          itemStyle: { color: '#fff', borderColor: COLORS[s], borderWidth: 1.5 },
          data: present.map((c) => {
            const r = phase!.cases[c]![s];
            return r ? [...(panel.pick(r) ?? [])] : [];
          }),
        });
      }
    });
  });
  const chart = echarts.init(null, null, { renderer: 'svg', ssr: true, width, height });
  chart.setOption({
    animation: false,
    backgroundColor: '#fff',
    title,
    legend: { data: [...SETUPS], right: 30, top: 12 },
    color: SETUPS.map((s) => COLORS[s]),
    grid,
    xAxis,
    yAxis,
    series,
  });
  const svg = chart.renderToSVGString();
  chart.dispose();
  return svg;
}
