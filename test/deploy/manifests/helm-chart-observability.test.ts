/**
 * The chart's autoscaling and observability objects (issue 21 items 4 and 5): the
 * HorizontalPodAutoscaler, the Grafana dashboard ConfigMap and the PrometheusRule. All are off by
 * default; when on, the built-in kinds validate against Kubernetes' strict schemas, as the rest of
 * the chart does (helm-chart.test.ts), and the dashboard and rules are the files in
 * config/observability, byte for byte.
 *
 * Needs .tools/bin/helm and the Kubernetes schemas (charts/install-tools.sh); skips, saying why, without them.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import yaml from 'js-yaml';
import { CHART_DIR, HELM, HELM_ONLY_LABELS, K8S_SCHEMA_DIR, KubeSchemas, helmTemplate, keyOf, render } from './helm-chart';
import { REPO_ROOT, type K8sObject } from './manifest-files';
import { CoordinatorMetrics } from '../../../src/observability/metrics';

type Json = Record<string, unknown>;
const OBSERVABILITY = path.join(REPO_ROOT, 'config/observability');
const FILES = ['grafana-dashboard.json', 'alert-rules.yaml'];

interface Hpa extends K8sObject {
  spec: {
    scaleTargetRef: { apiVersion: string; kind: string; name: string };
    minReplicas: number;
    maxReplicas: number;
    metrics: Json[];
    behavior: { scaleDown: { stabilizationWindowSeconds: number; selectPolicy: string; policies: Json[] } };
  };
}

const only = <T = K8sObject>(objs: readonly K8sObject[], kind: string): T => {
  const hit = objs.filter((o) => o.kind === kind);
  if (hit.length !== 1) throw new Error(`expected one ${kind}, found ${hit.length}`);
  return hit[0] as unknown as T;
};
const deploymentSpec = (objs: readonly K8sObject[]) => (only(objs, 'Deployment') as unknown as { spec: Json }).spec;

const AUTOSCALING_ON = { autoscaling: { enabled: true } };
const EVERYTHING_ON = {
  autoscaling: { enabled: true, inflight: { enabled: true } },
  metrics: {
    grafanaDashboard: { enabled: true, annotations: { grafana_folder: 'LLM' } },
    prometheusRule: { enabled: true, labels: { release: 'prometheus' } },
  },
};

test('the chart carries config/observability byte for byte (copy them after an edit: cp config/observability/{grafana-dashboard.json,alert-rules.yaml} charts/epd-coordinator/files/)', () => {
  for (const f of FILES) {
    expect({
      f,
      same: fs.readFileSync(path.join(CHART_DIR, 'files', f), 'utf8') === fs.readFileSync(path.join(OBSERVABILITY, f), 'utf8'),
    }).toEqual({
      f,
      same: true,
    });
  }
});

test("the HPA's default custom metric is the service's in-flight gauge", () => {
  const values = yaml.load(fs.readFileSync(path.join(CHART_DIR, 'values.yaml'), 'utf8')) as {
    autoscaling: { inflight: { metricName: string } };
  };
  const metric = new CoordinatorMetrics({ processMetrics: false }).registry.getSingleMetric(values.autoscaling.inflight.metricName);
  expect(metric?.constructor.name).toBe('Gauge');
});

const haveHelm = fs.existsSync(HELM);
const title = 'Helm chart: autoscaling, dashboard and alert rules';
(haveHelm ? describe : describe.skip)(
  haveHelm ? title : `${title} (skipped: .tools/bin/helm is absent; run charts/install-tools.sh, which needs Go)`,
  () => {
    jest.setTimeout(120_000);
    let defaults: K8sObject[];
    let everything: K8sObject[];
    beforeAll(() => {
      defaults = render();
      everything = render(EVERYTHING_ON);
    });

    test('all three are off by default, and the Deployment then keeps replicaCount', () => {
      expect(defaults.filter((o) => ['HorizontalPodAutoscaler', 'PrometheusRule'].includes(o.kind))).toEqual([]);
      expect(defaults.filter((o) => o.kind === 'ConfigMap').map((o) => o.metadata.name)).toEqual(['epd-coordinator-config']);
      expect(deploymentSpec(defaults)['replicas']).toBe(2);
    });

    test('helm lint --strict passes with all of them on', () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-lint-'));
      try {
        const values = path.join(dir, 'values.yaml');
        fs.writeFileSync(values, yaml.dump(EVERYTHING_ON));
        const r = spawnSync(HELM, ['lint', '--strict', CHART_DIR, '-f', values, '--kube-version', '1.30.0'], {
          encoding: 'utf8',
          timeout: 60_000,
        });
        expect({ status: r.status, out: r.status === 0 ? '' : r.stdout + r.stderr }).toEqual({ status: 0, out: '' });
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    const k8sTitle = `the HPA and the dashboard ConfigMap validate against Kubernetes ${path.basename(K8S_SCHEMA_DIR)} schemas, and carry the release labels`;
    (KubeSchemas.present() ? test : test.skip)(
      KubeSchemas.present() ? k8sTitle : `${k8sTitle} (skipped: ${K8S_SCHEMA_DIR} is absent)`,
      () => {
        const schemas = new KubeSchemas();
        const mine = everything.filter((o) => o.kind === 'HorizontalPodAutoscaler' || o.metadata.name.endsWith('-dashboard'));
        expect(mine.map((o) => `${o.kind}/${o.apiVersion}`).sort()).toEqual(['ConfigMap/v1', 'HorizontalPodAutoscaler/autoscaling/v2']);
        for (const o of [...mine, only(everything, 'Deployment')]) {
          expect({ o: keyOf(o), errors: schemas.validate(o) }).toEqual({ o: keyOf(o), errors: [] });
        }
        for (const o of [...mine, only(everything, 'PrometheusRule')]) {
          expect(Object.keys(o.metadata.labels ?? {})).toEqual(expect.arrayContaining([...HELM_ONLY_LABELS, 'app.kubernetes.io/part-of']));
        }
        // The check has teeth: a misspelt behaviour field is refused.
        const bad = structuredClone(only<Hpa>(everything, 'HorizontalPodAutoscaler'));
        (bad.spec.behavior.scaleDown as Json)['stabilisationWindowSeconds'] = 60;
        expect(schemas.validate(bad)).toEqual([expect.stringContaining('unknown field "stabilisationWindowSeconds"')]);
      },
    );

    test('HPA: scales the Deployment on CPU, and on in-flight requests per pod when asked; the Deployment leaves replicas to it', () => {
      const cpuOnly = render(AUTOSCALING_ON);
      const hpa = only<Hpa>(cpuOnly, 'HorizontalPodAutoscaler');
      expect(hpa.spec.scaleTargetRef).toEqual({
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        name: only(cpuOnly, 'Deployment').metadata.name,
      });
      expect([hpa.spec.minReplicas, hpa.spec.maxReplicas]).toEqual([2, 10]);
      expect(hpa.spec.metrics).toEqual([
        { type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 70 } } },
      ]);
      expect(deploymentSpec(cpuOnly)).not.toHaveProperty('replicas');

      // The Prometheus adapter serves the pod's gauge under its own name as a Pods metric.
      const both = only<Hpa>(everything, 'HorizontalPodAutoscaler');
      expect(both.spec.metrics[1]).toEqual({
        type: 'Pods',
        pods: { metric: { name: 'epd_coordinator_inflight_requests' }, target: { type: 'AverageValue', averageValue: '50' } },
      });
      const inflightOnly = only<Hpa>(
        render({ autoscaling: { enabled: true, cpuUtilization: 0, inflight: { enabled: true, averageValue: '200' } } }),
        'HorizontalPodAutoscaler',
      );
      expect(inflightOnly.spec.metrics.map((m) => m['type'])).toEqual(['Pods']);
    });

    test('HPA scale-down respects the drain: one pod per grace period (preStop + shutdown_timeout + margin) after a 5-minute window', () => {
      const scaleDown = (values: Json) => only<Hpa>(render(values), 'HorizontalPodAutoscaler').spec.behavior.scaleDown;
      expect(scaleDown(AUTOSCALING_ON)).toEqual({
        stabilizationWindowSeconds: 300,
        selectPolicy: 'Min',
        policies: [{ type: 'Pods', value: 1, periodSeconds: 35 }],
      });
      // A longer drain lengthens the grace period, and the period follows it.
      expect(
        scaleDown({ ...AUTOSCALING_ON, config: { server: { shutdown_timeout: '1m' } }, terminationGracePeriodSeconds: 70 }).policies,
      ).toEqual([{ type: 'Pods', value: 1, periodSeconds: 70 }]);
      expect(scaleDown({ autoscaling: { enabled: true, scaleDown: { pods: 2, periodSeconds: 60 } } }).policies).toEqual([
        { type: 'Pods', value: 2, periodSeconds: 60 },
      ]);
    });

    test('HPA values that cannot work are refused, naming the value', () => {
      for (const [values, says] of [
        [
          { autoscaling: { enabled: true, scaleDown: { periodSeconds: 20 } } },
          /periodSeconds \(20\) must cover preStopSleepSeconds \+ config.server.shutdown_timeout \(30s\)/,
        ],
        [{ autoscaling: { enabled: true, cpuUtilization: 0 } }, /autoscaling needs a target/],
        [{ autoscaling: { enabled: true }, resources: { requests: { cpu: null } } }, /percentage of resources.requests.cpu/],
        [{ autoscaling: { enabled: true, minReplicas: 5, maxReplicas: 3 } }, /minReplicas \(5\) is above autoscaling.maxReplicas \(3\)/],
        [{ autoscaling: { enabled: true, inflight: { enabled: true, metricName: 'in flight' } } }, /metricName/],
        [{ autoscaling: { enabled: true, scaleDown: { pods: 0 } } }, /pods/],
        [{ autoscaling: { enabeld: true } }, /enabeld/],
      ] as const) {
        const r = helmTemplate(values as Json);
        expect({ values, status: r.status, says: says.test(r.stderr) }).toEqual({ values, status: 1, says: true });
      }
    });

    test("dashboard ConfigMap: labelled for Grafana's sidecar, holding config/observability/grafana-dashboard.json", () => {
      const cm = everything.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-dashboard')) as K8sObject & {
        data: Record<string, string>;
        metadata: { annotations?: Record<string, string> };
      };
      expect(cm.metadata.labels?.['grafana_dashboard']).toBe('1');
      expect(cm.metadata.annotations).toEqual({ grafana_folder: 'LLM' });
      expect(Object.keys(cm.data)).toEqual(['epd-coordinator.json']);
      expect(cm.data['epd-coordinator.json']).toBe(fs.readFileSync(path.join(OBSERVABILITY, 'grafana-dashboard.json'), 'utf8').trimEnd());
      const custom = render({ metrics: { grafanaDashboard: { enabled: true, labels: { dashboards: 'llm' } } } });
      expect(custom.find((o) => o.metadata.name.endsWith('-dashboard'))?.metadata.labels?.['dashboards']).toBe('llm');
      // Without a metrics port there is nothing to draw.
      expect(
        render({ metrics: { enabled: false, grafanaDashboard: { enabled: true } } }).some((o) => o.metadata.name.endsWith('-dashboard')),
      ).toBe(false);
    });

    test('PrometheusRule (monitoring.coreos.com/v1): the rules of config/observability/alert-rules.yaml, only fields the v1 CRD defines', () => {
      const rule = only<K8sObject & { spec: { groups: Array<Json & { rules: Json[] }> } }>(everything, 'PrometheusRule');
      expect(rule.apiVersion).toBe('monitoring.coreos.com/v1');
      expect(rule.metadata.labels?.['release']).toBe('prometheus');
      expect(rule.spec).toEqual(yaml.load(fs.readFileSync(path.join(OBSERVABILITY, 'alert-rules.yaml'), 'utf8')));
      // No Prometheus Operator CRD is available offline: the v1 schema's fields (spec.groups[].name/interval/rules,
      // rules[].alert/record/expr/for/keep_firing_for/labels/annotations), checked structurally.
      expect(Object.keys(rule.spec)).toEqual(['groups']);
      const duration = /^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$/;
      for (const g of rule.spec.groups) {
        expect(Object.keys(g).every((k) => ['name', 'interval', 'rules', 'limit'].includes(k))).toBe(true);
        for (const r of g.rules) {
          expect({
            r: r['alert'],
            keys: Object.keys(r).every((k) => ['alert', 'expr', 'for', 'labels', 'annotations'].includes(k)),
          }).toEqual({
            r: r['alert'],
            keys: true,
          });
          expect(typeof r['expr']).toBe('string');
          expect(r['for']).toMatch(duration);
          for (const map of [r['labels'], r['annotations']]) for (const v of Object.values(map as Json)) expect(typeof v).toBe('string');
        }
      }
      expect(render({ metrics: { enabled: false, prometheusRule: { enabled: true } } }).some((o) => o.kind === 'PrometheusRule')).toBe(
        false,
      );
    });
  },
);
