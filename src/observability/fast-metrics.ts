/**
 * Counter, gauge and histogram families for the metrics updated on the request path.
 *
 * Why not prom-client's own: even through a cached `labels()` child, every `inc()`/`observe()`
 * there rebuilds a label-hash string, validates the label names, looks the series up by that
 * string and finds the bucket by a float-keyed object property. Here a child is made once per
 * label-value tuple and an update is a few adds on plain numbers (a histogram child: a count per
 * bucket index, `sum`, `count`).
 *
 * Each family registers itself in a prom-client Registry and implements the part of prom-client's
 * metric contract the Registry and `AggregatorRegistry.aggregate` use (`name`, `help`, `type`,
 * `aggregator`, `get()`, `reset()`), and `get()` returns the values prom-client's own classes
 * return, in their order, so the exposition text and the cluster aggregation do not change: a
 * labelled series appears with its first update, an unlabelled one shows its zero from the start.
 *
 * Children are kept for the family's life, one per distinct tuple: callers pass bounded label
 * values only (see metrics.ts).
 */
import { validateMetricName, type Aggregator, type Metric, type Registry } from 'prom-client';

export type LabelSet = Readonly<Record<string, string>>;

export interface FamilyConfig {
  readonly name: string;
  readonly help: string;
  readonly labelNames?: readonly string[];
  readonly registers: readonly Registry[];
  /** How `AggregatorRegistry.aggregate` combines the processes of a `server.workers` > 1 pod (default sum). */
  readonly aggregator?: Aggregator;
}

export interface HistogramConfig extends FamilyConfig {
  /** Upper bounds, strictly increasing; `+Inf` is implied. */
  readonly buckets: readonly number[];
}

/** One exported sample, as prom-client's `get()` shapes it. */
export interface SampleJson {
  value: number;
  labels: Record<string, string | number>;
  metricName?: string;
  exemplar?: null;
}

export interface FamilyJson {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  values: SampleJson[];
  aggregator: Aggregator;
}

const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** A labelled series. It joins its family's export list on its first update, as prom-client's do. */
abstract class Series {
  private shown = false;

  constructor(
    readonly labels: LabelSet,
    private readonly exported: Series[],
  ) {}

  protected touch(): void {
    if (this.shown) return;
    this.shown = true;
    this.exported.push(this);
  }

  /** Exported before any update: an unlabelled family's series, as prom-client shows it. */
  showZero(): void {
    this.touch();
  }

  /** Back to zero and out of the export (its family was reset). */
  clear(): void {
    this.shown = false;
    this.zero();
  }

  protected abstract zero(): void;
}

abstract class Family<S extends Series> {
  abstract readonly type: FamilyJson['type'];
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly string[];
  readonly aggregator: Aggregator;
  /** The series updated since the start (or the last reset), in first-update order. */
  protected readonly exported: S[] = [];
  /** Label value -> series, or -> the next label's map: no joined key, so no separator to reserve. */
  private readonly tree = new Map<string, unknown>();
  private base: S | undefined;

  constructor(config: FamilyConfig) {
    this.name = config.name;
    this.help = config.help;
    this.labelNames = Object.freeze([...(config.labelNames ?? [])]);
    this.aggregator = config.aggregator ?? 'sum';
    if (!validateMetricName(this.name)) throw new Error(`invalid metric name ${this.name}`);
    for (const label of this.labelNames) if (!LABEL_NAME.test(label)) throw new Error(`${this.name}: invalid label name ${label}`);
    // The Registry reads name, type, get() and reset() only; prom-client types it with its own classes.
    for (const registry of config.registers) registry.registerMetric(this as unknown as Metric);
  }

  /** The series of these label values (in `labelNames` order), made on first use and kept. */
  labels(...values: string[]): S {
    const names = this.labelNames;
    if (values.length !== names.length) throw new Error(`${this.name}: ${values.length} label values for ${names.length} labels`);
    if (values.length === 0) return this.unlabelled();
    let level = this.tree;
    const last = values.length - 1;
    for (let i = 0; i < last; i++) {
      let next = level.get(values[i]) as Map<string, unknown> | undefined;
      if (!next) level.set(values[i], (next = new Map()));
      level = next;
    }
    let series = level.get(values[last]) as S | undefined;
    if (!series) {
      const labels: Record<string, string> = {};
      for (let i = 0; i < names.length; i++) labels[names[i]] = values[i];
      series = this.create(Object.freeze(labels));
      level.set(values[last], series);
    }
    return series;
  }

  reset(): void {
    for (const series of this.exported) series.clear();
    this.exported.length = 0;
    if (this.base && this.zeroAfterReset) this.base.showZero();
  }

  async get(): Promise<FamilyJson> {
    return { name: this.name, help: this.help, type: this.type, values: this.samples(), aggregator: this.aggregator };
  }

  /** The series of a family without labels. */
  protected unlabelled(): S {
    if (this.labelNames.length > 0) throw new Error(`${this.name} has labels ${this.labelNames.join(', ')}: use labels()`);
    return (this.base ??= this.create({}));
  }

  /** Whether an unlabelled family shows its zero after a reset (prom-client: counters and gauges do). */
  protected abstract readonly zeroAfterReset: boolean;
  protected abstract create(labels: LabelSet): S;
  protected abstract samples(): SampleJson[];
}

/** The series of a counter or a gauge: one number. */
abstract class ValueSeries extends Series {
  // Not yet exported: -0, as -0 + x is x for every x and prom-client starts a series at its first
  // delta (a first `dec(0)` exports -0 in its JSON, and here too).
  value = -0;

  override showZero(): void {
    this.value = 0;
    super.showZero();
  }

  protected zero(): void {
    this.value = -0;
  }
}

export class CounterSeries extends ValueSeries {
  inc(by = 1): void {
    if (!(by >= 0 && by < Infinity)) throw new RangeError(`counter increment must be finite and not negative: ${by}`);
    this.value += by;
    this.touch();
  }
}

export class GaugeSeries extends ValueSeries {
  inc(by = 1): void {
    this.value += by;
    this.touch();
  }

  dec(by = 1): void {
    this.value -= by;
    this.touch();
  }

  set(value: number): void {
    this.value = value;
    this.touch();
  }
}

abstract class ValueFamily<S extends ValueSeries> extends Family<S> {
  protected readonly zeroAfterReset = true;

  constructor(config: FamilyConfig) {
    super(config);
    // prom-client exports an unlabelled counter or gauge from the start.
    if (this.labelNames.length === 0) this.unlabelled().showZero();
  }

  protected samples(): SampleJson[] {
    return this.exported.map((s) => ({ value: s.value, labels: s.labels }));
  }
}

export class Counter extends ValueFamily<CounterSeries> {
  readonly type = 'counter';

  inc(by?: number): void {
    this.unlabelled().inc(by);
  }

  protected create(labels: LabelSet): CounterSeries {
    return new CounterSeries(labels, this.exported);
  }
}

export class Gauge extends ValueFamily<GaugeSeries> {
  readonly type = 'gauge';

  inc(by?: number): void {
    this.unlabelled().inc(by);
  }

  dec(by?: number): void {
    this.unlabelled().dec(by);
  }

  set(value: number): void {
    this.unlabelled().set(value);
  }

  protected create(labels: LabelSet): GaugeSeries {
    return new GaugeSeries(labels, this.exported);
  }
}

export class HistogramSeries extends Series {
  /** Observations per bucket (not cumulative); over the last bound only `count` moves. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    labels: LabelSet,
    exported: Series[],
    private readonly bounds: readonly number[],
  ) {
    super(labels, exported);
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) throw new RangeError(`histogram observation must be finite: ${value}`);
    const bounds = this.bounds;
    let i = 0;
    // The first bound >= value, as prom-client's findBound; most observations sit in the first few.
    while (i < bounds.length && value > bounds[i]) i++;
    if (i < bounds.length) this.counts[i]++;
    this.sum += value;
    this.count++;
    this.touch();
  }

  protected zero(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }
}

export class Histogram extends Family<HistogramSeries> {
  readonly type = 'histogram';
  readonly upperBounds: readonly number[];
  // prom-client's reset() empties an unlabelled histogram's map until the next observation.
  protected readonly zeroAfterReset = false;

  constructor(config: HistogramConfig) {
    const bounds = Object.freeze([...config.buckets]);
    bounds.forEach((b, i) => {
      if (!Number.isFinite(b) || (i > 0 && b <= bounds[i - 1]))
        throw new Error(`${config.name}: buckets must be finite and strictly increasing`);
    });
    if (config.labelNames?.includes('le')) throw new Error(`${config.name}: le is a reserved label name`);
    super(config);
    this.upperBounds = bounds;
    if (this.labelNames.length === 0) this.unlabelled().showZero();
  }

  observe(value: number): void {
    this.unlabelled().observe(value);
  }

  protected create(labels: LabelSet): HistogramSeries {
    return new HistogramSeries(labels, this.exported, this.upperBounds);
  }

  /** prom-client's shape: per series the cumulative `_bucket`s in bound order, `+Inf`, `_sum`, `_count`. */
  protected samples(): SampleJson[] {
    const bucket = `${this.name}_bucket`;
    const out: SampleJson[] = [];
    for (const s of this.exported) {
      let cumulative = 0;
      this.upperBounds.forEach((le, i) => {
        cumulative += s.counts[i];
        out.push({ value: cumulative, metricName: bucket, exemplar: null, labels: { le, ...s.labels } });
      });
      out.push({ value: s.count, metricName: bucket, exemplar: null, labels: { le: '+Inf', ...s.labels } });
      out.push({ value: s.sum, metricName: `${this.name}_sum`, exemplar: undefined, labels: { ...s.labels } });
      out.push({ value: s.count, metricName: `${this.name}_count`, exemplar: undefined, labels: { ...s.labels } });
    }
    return out;
  }
}
