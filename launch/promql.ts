/**
 * The PromQL the repository ships (the Grafana dashboard's panel queries and the alert rules), read
 * from config/observability, and the small amount of PromQL structure the tests need: the operands
 * of the top-level comparisons and set operators (so that each part that reads data can be asked
 * on its own), the metric names an expression reads, and constants standing in for data.
 */
import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';
import { ALERT_RULES_FILE, DASHBOARD_FILE } from './prometheus';

export interface ShippedExpression {
  /** `panel "<title>" <refId>` or `alert <name>`. */
  readonly where: string;
  readonly expr: string;
}

interface DashboardPanel {
  type: string;
  title: string;
  targets?: Array<{ refId: string; expr: string }>;
}

export function dashboardExpressions(file = DASHBOARD_FILE): ShippedExpression[] {
  const dash = JSON.parse(readFileSync(file, 'utf8')) as { panels: DashboardPanel[] };
  return dash.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `panel "${p.title}" ${t.refId}`, expr: t.expr })));
}

export function alertExpressions(file = ALERT_RULES_FILE): ShippedExpression[] {
  const doc = yaml.load(readFileSync(file, 'utf8')) as {
    groups: Array<{ rules: Array<{ alert?: string; record?: string; expr: string }> }>;
  };
  return doc.groups.flatMap((g) => g.rules.map((r) => ({ where: r.alert ? `alert ${r.alert}` : `record ${r.record}`, expr: r.expr })));
}

/**
 * Grafana's variables as Grafana fills them in for "All" and a given rate window: `$job` is the
 * dashboard's allValue, `$__rate_interval` the window.
 */
export function withGrafanaVariables(expr: string, rateInterval: string): string {
  return expr.replaceAll('$__rate_interval', rateInterval).replaceAll('$job', '.+');
}

const COMPARISONS = ['==', '!=', '>=', '<=', '>', '<'];
const SET_OPERATORS = [' and ', ' or ', ' unless '];

/** `expr` split at the given binary operators where they stand at the top level (outside brackets, braces and quotes). */
function splitTopLevel(expr: string, operators: readonly string[]): string[] {
  const out: string[] = [];
  let depth = 0;
  let quote: string | null = null;
  let start = 0;
  for (let i = 0; i < expr.length; i++) {
    const c = expr[i]!;
    if (quote) {
      if (c === '\\') i++;
      else if (c === quote) quote = null;
      continue;
    }
    if (c === '"' || c === "'" || c === '`') quote = c;
    else if ('([{'.includes(c)) depth++;
    else if (')]}'.includes(c)) depth--;
    else if (depth === 0) {
      const op = operators.find((o) => expr.startsWith(o, i));
      if (op) {
        out.push(expr.slice(start, i).trim());
        i += op.length - 1;
        start = i + 1;
      }
    }
  }
  out.push(expr.slice(start).trim());
  return out.filter((x) => x !== '');
}

/**
 * The operands of the top-level comparison and set operators: `a / b > 0.05 and c > 120` ->
 * [`a / b`, `0.05`, `c`, `120`]. Arithmetic stays inside an operand. Brackets, braces and quotes
 * nest, so label matchers (`{code!="200"}`) and function arguments are never split.
 */
export function topLevelOperands(expr: string): string[] {
  return splitTopLevel(expr, SET_OPERATORS).flatMap((clause) => splitTopLevel(clause, COMPARISONS));
}

const NUMBER = /^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$/i;
export const isNumberLiteral = (operand: string): boolean => NUMBER.test(operand);

const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'offset',
  'and',
  'or',
  'unless',
  'inf',
  'nan',
]);

/** The metric names a PromQL expression selects: what is left after strings, matchers, ranges, grouping clauses and calls. */
export function metricNamesOf(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = [...bare.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*(?!\s*\()/g)]
    .filter((m) => !/[0-9.]/.test(bare[m.index - 1] ?? '') && !/[a-zA-Z0-9_:(]/.test(bare[m.index + m[0].length] ?? ''))
    .map((m) => m[0])
    .filter((n) => !KEYWORDS.has(n.toLowerCase()));
  return [...new Set(names)];
}

/**
 * Why an expression lets a constant stand in for data, or undefined when it does not: `vector(…)`,
 * `scalar(…)` or `time()` anywhere, data multiplied by 0, a clause of a set operator (`x or 0`)
 * that reads no metric, or any operand that reads no metric and is not the threshold of a comparison.
 */
export function constantStandIn(expr: string): string | undefined {
  if (/\b(vector|scalar|time)\s*\(/.test(expr)) return 'uses vector(), scalar() or time()';
  if (/\*\s*0(?![.\d])|(?<![.\d])0\s*\*/.test(expr)) return 'multiplies data by 0';
  for (const clause of splitTopLevel(expr, SET_OPERATORS)) {
    const data = splitTopLevel(clause, COMPARISONS).filter((p) => !isNumberLiteral(p));
    if (data.length === 0) return `"${clause}" reads no metric`;
    const blind = data.find((p) => metricNamesOf(p).length === 0);
    if (blind !== undefined) return `operand "${blind}" reads no metric`;
  }
  return undefined;
}
