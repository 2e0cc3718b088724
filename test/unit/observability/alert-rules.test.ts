/**
 * The shipped alert rules and dashboard queries (config/observability), without a running stack:
 * promtool accepts the rules and its unit tests fire every alert (and keep it quiet beside), each
 * alert has its runbook in docs/operations.md, and no expression lets a constant stand in for
 * data. test/e2e/prometheus.test.ts runs the same expressions against a real scrape.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { ALERT_RULES_FILE, OBSERVABILITY_DIR, PROMTOOL_BIN, prometheusMissing } from '../../../launch/prometheus';
import { alertExpressions, constantStandIn, dashboardExpressions, metricNamesOf, topLevelOperands } from '../../../launch/promql';
import { REPO_ROOT } from '../../../launch/envoy-bootstrap';

const FIXTURES = join(OBSERVABILITY_DIR, 'alert-rules.test.yaml');
const shipped = [...dashboardExpressions(), ...alertExpressions()];

interface RuleDoc {
  groups: Array<{ rules: Array<{ alert: string; expr: string; for: string; annotations: Record<string, string> }> }>;
}
const rules = (yaml.load(readFileSync(ALERT_RULES_FILE, 'utf8')) as RuleDoc).groups.flatMap((g) => g.rules);

test('the alerts are: error ratio, p99 latency, EPP no endpoints, broker backlog, not ready, dependency down', () => {
  expect(rules.map((r) => r.alert)).toEqual([
    'EpdCoordinatorErrorRatioHigh',
    'EpdCoordinatorLatencyP99High',
    'EpdCoordinatorEppNoEndpoints',
    'EpdCoordinatorBrokerBacklogGrowing',
    'EpdCoordinatorNotReady',
    'EpdCoordinatorDependencyDown',
  ]);
});

test('every alert links its runbook, a section of docs/operations.md named after it', () => {
  const ops = readFileSync(join(REPO_ROOT, 'docs/operations.md'), 'utf8');
  for (const r of rules) {
    expect({ alert: r.alert, runbook: r.annotations['runbook'] }).toEqual({
      alert: r.alert,
      runbook: `docs/operations.md#${r.alert.toLowerCase()}`,
    });
    expect({ alert: r.alert, heading: new RegExp(`^#### ${r.alert}$`, 'm').test(ops) }).toEqual({ alert: r.alert, heading: true });
  }
});

test.each(shipped.map((e) => [e.where, e.expr]))('%s reads metrics and no constant stands in for data', (_where, expr) => {
  expect(constantStandIn(expr)).toBeUndefined();
  expect(metricNamesOf(expr).every((n) => /^(llm_d_coordinator_|epd_coordinator_|process_|nodejs_)/.test(n))).toBe(true);
});

test('the stand-in check has teeth', () => {
  for (const bad of [
    'sum(rate(llm_d_coordinator_request_total[5m])) or vector(0)',
    'sum(rate(epd_coordinator_side_call_no_endpoint_total[5m])) > 0 or on() 1',
    'epd_coordinator_ready * 0 + 1',
    '1',
    'scalar(epd_coordinator_ready)',
    'epd_coordinator_ready > 0 unless (1 > 2)',
  ]) {
    expect({ bad, why: constantStandIn(bad) }).toEqual({ bad, why: expect.any(String) });
  }
  expect(topLevelOperands('a{x=~"1|>2"} / b > 0.05 and max by (q) (c) > 120')).toEqual([
    'a{x=~"1|>2"} / b',
    '0.05',
    'max by (q) (c)',
    '120',
  ]);
  expect(metricNamesOf('histogram_quantile(0.99, sum by (le, step) (rate(x_bucket{job=~"$job"}[5m]))) > 10')).toEqual(['x_bucket']);
});

interface Fixtures {
  rule_files: string[];
  tests: Array<{ alert_rule_test: Array<{ alertname: string; exp_alerts: unknown[] }> }>;
}

test('the promtool fixtures test the shipped rules file, and each alert both fires and stays quiet in them', () => {
  const fx = yaml.load(readFileSync(FIXTURES, 'utf8')) as Fixtures;
  expect(fx.rule_files).toEqual(['alert-rules.yaml']);
  const cases = fx.tests.flatMap((t) => t.alert_rule_test);
  for (const r of rules) {
    const mine = cases.filter((c) => c.alertname === r.alert);
    expect({
      alert: r.alert,
      fires: mine.some((c) => c.exp_alerts.length > 0),
      quiet: mine.some((c) => c.exp_alerts.length === 0),
    }).toEqual({
      alert: r.alert,
      fires: true,
      quiet: true,
    });
  }
});

const missing = prometheusMissing();
const promtoolTitle = 'promtool check rules and promtool test rules pass';
(missing ? test.skip : test)(missing ? `${promtoolTitle} (skipped: ${missing})` : promtoolTitle, () => {
  const check = spawnSync(PROMTOOL_BIN, ['check', 'rules', ALERT_RULES_FILE], { encoding: 'utf8', timeout: 30_000 });
  expect({ status: check.status, out: check.stdout + check.stderr }).toEqual({
    status: 0,
    out: expect.stringContaining('SUCCESS: 6 rules found'),
  });
  const unit = spawnSync(PROMTOOL_BIN, ['test', 'rules', FIXTURES], { encoding: 'utf8', timeout: 30_000, cwd: OBSERVABILITY_DIR });
  expect({ status: unit.status, out: unit.stdout + unit.stderr }).toEqual({ status: 0, out: expect.stringContaining('SUCCESS') });
  // And the fixtures are not vacuous: the same fixtures against a rule whose threshold is raised past their data fail.
  const dir = mkdtempSync(join(tmpdir(), 'epd-rules-'));
  try {
    writeFileSync(join(dir, 'alert-rules.yaml'), readFileSync(ALERT_RULES_FILE, 'utf8').replace('[5m])) > 0.05', '[5m])) > 0.2'));
    writeFileSync(join(dir, 'alert-rules.test.yaml'), readFileSync(FIXTURES, 'utf8'));
    const broken = spawnSync(PROMTOOL_BIN, ['test', 'rules', 'alert-rules.test.yaml'], { encoding: 'utf8', timeout: 30_000, cwd: dir });
    expect({ status: broken.status, failed: /FAILED[\s\S]*EpdCoordinatorErrorRatioHigh/.test(broken.stdout + broken.stderr) }).toEqual({
      status: 1,
      failed: true,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
