/**
 * The Grafana dashboard's panels drawn as one SVG with echarts (server-side, no browser): a grid of
 * small time-series charts, one per panel, each line a series of a Prometheus range query, named
 * by the panel's legend format. Grafana is not in Debian, so this is how docs/ shows the dashboard.
 */
import * as echarts from 'echarts';
import type { Series } from '../launch/prometheus';

export interface DrawnPanel {
  readonly title: string;
  /** Grafana's unit of the panel (`reqps`, `s`, `bytes`, `percentunit`, `short`). */
  readonly unit: string;
  readonly lines: ReadonlyArray<{ readonly name: string; readonly points: ReadonlyArray<readonly [number, number]> }>;
}

const COLUMNS = 3;
const PANEL_W = 460;
const PANEL_H = 250;
const HEADER_H = 60;

/** `{{phase}} {{status}}` filled in from a series' labels, as Grafana does. */
export function legendName(format: string, metric: Record<string, string>): string {
  const name = format.replace(/\{\{\s*(\w+)\s*\}\}/g, (_, label: string) => metric[label] ?? '');
  return name.trim() || JSON.stringify(metric);
}

/** A range query's series as chart lines (milliseconds on x; NaN points dropped). */
export function linesOf(series: readonly Series[], format: string): DrawnPanel['lines'] {
  return series.map((s) => ({
    name: legendName(format, s.metric),
    points: s.values.map(([t, v]) => [t * 1000, Number(v)] as const).filter(([, v]) => Number.isFinite(v)),
  }));
}

function axisLabel(unit: string): (v: number) => string {
  switch (unit) {
    case 's':
      return (v) => (v >= 1 ? `${+v.toFixed(2)} s` : `${+(v * 1000).toFixed(1)} ms`);
    case 'bytes':
      return (v) => `${+(v / 2 ** 20).toFixed(0)} MiB`;
    case 'percentunit':
      return (v) => `${+(v * 100).toFixed(0)}%`;
    case 'reqps':
      return (v) => `${+v.toFixed(2)}/s`;
    default:
      return (v) => `${+v.toFixed(2)}`;
  }
}

export function dashboardSvg(title: string, subtitle: string, panels: readonly DrawnPanel[]): string {
  const rows = Math.ceil(panels.length / COLUMNS);
  const width = COLUMNS * PANEL_W;
  const height = HEADER_H + rows * PANEL_H;
  const chart = echarts.init(null, null, { renderer: 'svg', ssr: true, width, height });
  const at = (i: number) => ({ left: (i % COLUMNS) * PANEL_W, top: HEADER_H + Math.floor(i / COLUMNS) * PANEL_H });
  chart.setOption({
    animation: false,
    backgroundColor: '#ffffff',
    textStyle: { fontFamily: 'sans-serif' },
    title: [
      { text: title, subtext: subtitle, left: 12, top: 6, textStyle: { fontSize: 16 }, subtextStyle: { fontSize: 11 } },
      ...panels.map((p, i) => ({ text: p.title, left: at(i).left + 12, top: at(i).top + 4, textStyle: { fontSize: 13 } })),
    ],
    legend: panels.map((p, i) => ({
      data: p.lines.map((l) => l.name),
      left: at(i).left + 12,
      top: at(i).top + PANEL_H - 46,
      width: PANEL_W - 24,
      itemWidth: 12,
      itemHeight: 8,
      textStyle: { fontSize: 9 },
      type: 'scroll',
    })),
    grid: panels.map((_, i) => ({ left: at(i).left + 62, top: at(i).top + 32, width: PANEL_W - 86, height: PANEL_H - 100 })),
    xAxis: panels.map((_, i) => ({
      type: 'time',
      gridIndex: i,
      axisLabel: { fontSize: 9, formatter: '{HH}:{mm}:{ss}' },
      splitLine: { show: false },
    })),
    yAxis: panels.map((p, i) => ({ type: 'value', gridIndex: i, axisLabel: { fontSize: 9, formatter: axisLabel(p.unit) } })),
    series: panels.flatMap((p, i) =>
      p.lines.map((l) => ({
        type: 'line',
        name: l.name,
        xAxisIndex: i,
        yAxisIndex: i,
        showSymbol: false,
        lineStyle: { width: 1.5 },
        data: l.points.map(([t, v]) => [t, v]),
      })),
    ),
  });
  const svg = chart.renderToSVGString();
  chart.dispose();
  return svg;
}
