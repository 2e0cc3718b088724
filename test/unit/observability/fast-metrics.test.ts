/**
 * The fast families against prom-client's own: the same seeded update sequence applied to both
 * gives the same exposition text, the same `getMetricsAsJSON()` and the same cluster aggregation.
 */
import * as prom from 'prom-client';
import { AggregatorRegistry, Registry } from 'prom-client';
import * as fast from '../../../src/observability/fast-metrics';

/** mulberry32: a small seeded generator, so a failure replays. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const BUCKETS = [0.005, 0.025, 0.1, 1, 2.5, 10];
const VALUES = ['plain', 'with "quotes"', 'back\\slash', 'new\nline', '', 'a,b=c', '}{'];
const OBSERVED = [...BUCKETS, 0, -1, 0.001, 11, 1e9, 0.3, 2.4999, 7];
const AMOUNTS = [undefined, 0, 1, 2.5, 0.1, 3];
const GAUGE_AMOUNTS = [undefined, 0, 1, 2.5, -4, 0.1];

type Kind = 'counter' | 'gauge' | 'histogram';
const LABELSETS: readonly (readonly string[])[] = [[], ['model_name'], ['phase', 'status']];

interface Target {
  inc(by?: number): void;
  dec(by?: number): void;
  set(v: number): void;
  observe(v: number): void;
}
/** What the test calls on either implementation's family. */
interface Family extends Target {
  labels(...values: string[]): Target;
  reset(): void;
}
interface Pair {
  readonly kind: Kind;
  readonly labelNames: readonly string[];
  /** The series of these values in each implementation (prom-client's, ours). */
  readonly series: (values: readonly string[]) => [Target, Target];
  readonly reset: () => void;
}

function pairOf(kind: Kind, labelNames: readonly string[], theirs: Registry, ours: Registry, aggregator?: prom.Aggregator): Pair {
  const name = `test_${kind}_${labelNames.length}`;
  const config = {
    name,
    help: `A "${kind}" with\\ ${labelNames.length} labels.\nSecond line.`,
    labelNames: [...labelNames],
    ...(aggregator && { aggregator }),
  };
  const make = (implementation: typeof prom | typeof fast, registry: Registry): Family => {
    const Class = { counter: implementation.Counter, gauge: implementation.Gauge, histogram: implementation.Histogram }[kind];
    return new (Class as unknown as new (c: object) => Family)({ ...config, buckets: BUCKETS, registers: [registry] });
  };
  const [p, f] = [make(prom, theirs), make(fast, ours)];
  const of = (family: Family, values: readonly string[]) => (values.length === 0 ? family : family.labels(...values));
  return {
    kind,
    labelNames,
    series: (values) => [of(p, values), of(f, values)],
    reset: () => {
      p.reset();
      f.reset();
    },
  };
}

function pick<T>(rnd: () => number, of: readonly T[]): T {
  return of[Math.floor(rnd() * of.length)];
}

/** Applies one seeded sequence to every pair; both sides of a pair see the same calls. */
function play(pairs: readonly Pair[], seed: number, steps = 400): void {
  const rnd = random(seed);
  for (let n = 0; n < steps; n++) {
    const pair = pick(rnd, pairs);
    const values = pair.labelNames.map(() => pick(rnd, VALUES));
    const [a, b] = pair.series(values);
    const roll = rnd();
    if (roll < 0.01) pair.reset();
    else if (roll < 0.05)
      continue; // a series made and never updated
    else if (pair.kind === 'counter') {
      const by = pick(rnd, AMOUNTS);
      a.inc(by);
      b.inc(by);
    } else if (pair.kind === 'gauge') {
      const by = pick(rnd, GAUGE_AMOUNTS);
      const op = pick(rnd, ['inc', 'dec', 'set'] as const);
      if (op === 'set') {
        a.set(by ?? -7);
        b.set(by ?? -7);
      } else {
        a[op](by);
        b[op](by);
      }
    } else {
      const v = pick(rnd, OBSERVED) * (rnd() < 0.5 ? 1 : 1 + rnd());
      a.observe(v);
      b.observe(v);
    }
  }
}

function build(aggregators: Partial<Record<Kind, prom.Aggregator>> = {}): { theirs: Registry; ours: Registry; pairs: Pair[] } {
  const theirs = new Registry();
  const ours = new Registry();
  const pairs: Pair[] = [];
  for (const kind of ['counter', 'gauge', 'histogram'] as const)
    for (const labelNames of LABELSETS) pairs.push(pairOf(kind, labelNames, theirs, ours, aggregators[kind]));
  return { theirs, ours, pairs };
}

test('a fresh registry: unlabelled families show their zero, labelled ones nothing', async () => {
  const { theirs, ours } = build();
  expect(await ours.metrics()).toBe(await theirs.metrics());
  expect(await ours.getMetricsAsJSON()).toStrictEqual(await theirs.getMetricsAsJSON());
});

test.each([1, 2, 3, 42, 2026])('seed %i: the same updates give the same text and JSON', async (seed) => {
  const { theirs, ours, pairs } = build();
  play(pairs, seed);
  const text = await ours.metrics();
  expect(text).toBe(await theirs.metrics());
  expect(await ours.getMetricsAsJSON()).toStrictEqual(await theirs.getMetricsAsJSON());
  // The sequence reached the escaping, the edge buckets and a negative gauge.
  expect(text).toContain('model_name="new\\nline"');
  expect(text).toContain('status="with \\"quotes\\""');
  expect(text).toMatch(/test_histogram_1_bucket\{le="0.005",model_name="[^"]*"\} [1-9]/);
  expect(text).toMatch(/^test_gauge_0 -|test_gauge_1\{model_name="[^"]*"\} -/m);
});

test('a reset empties the labelled series, keeps the unlabelled zeros prom-client keeps, and series come back on update', async () => {
  const { theirs, ours, pairs } = build();
  play(pairs, 7);
  for (const p of pairs) p.reset();
  expect(await ours.metrics()).toBe(await theirs.metrics());
  play(pairs, 8, 100);
  expect(await ours.metrics()).toBe(await theirs.metrics());
  expect(await ours.getMetricsAsJSON()).toStrictEqual(await theirs.getMetricsAsJSON());
});

test.each([
  ['sum', {}],
  ['max/min/average', { counter: 'max', gauge: 'min', histogram: 'average' }],
] as const)('two registries aggregate as prom-client aggregates (%s)', async (_title, aggregators) => {
  const one = build(aggregators);
  const two = build(aggregators);
  play(one.pairs, 11);
  play(two.pairs, 12);
  const theirs = AggregatorRegistry.aggregate([await one.theirs.getMetricsAsJSON(), await two.theirs.getMetricsAsJSON()]);
  const ours = AggregatorRegistry.aggregate([await one.ours.getMetricsAsJSON(), await two.ours.getMetricsAsJSON()]);
  expect(await ours.metrics()).toBe(await theirs.metrics());
  expect(await ours.getMetricsAsJSON()).toStrictEqual(await theirs.getMetricsAsJSON());
});

test('a series keeps its values across calls to labels(), and a wrong label count or value is refused', () => {
  const registry = new Registry();
  const c = new fast.Counter({ name: 'c_total', help: 'h', labelNames: ['a', 'b'], registers: [registry] });
  expect(c.labels('x', 'y')).toBe(c.labels('x', 'y'));
  expect(c.labels('x', 'y')).not.toBe(c.labels('y', 'x'));
  expect(() => c.labels('x')).toThrow(/1 label values for 2 labels/);
  expect(() => c.inc()).toThrow(/use labels/);
  expect(() => c.labels('x', 'y').inc(-1)).toThrow(RangeError);
  const h = new fast.Histogram({ name: 'h', help: 'h', buckets: [1, 2], registers: [registry] });
  expect(() => h.observe(Number.NaN)).toThrow(RangeError);
  expect(() => new fast.Histogram({ name: 'h2', help: 'h', buckets: [2, 1], registers: [registry] })).toThrow(/increasing/);
  expect(() => new fast.Histogram({ name: 'h3', help: 'h', labelNames: ['le'], buckets: [1], registers: [registry] })).toThrow(/reserved/);
  expect(() => new fast.Gauge({ name: 'c_total', help: 'h', registers: [registry] })).toThrow(/already been registered/);
});
