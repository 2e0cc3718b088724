/**
 * The chart with `gateways.provider: istio` renders config/istio for its release (release
 * epd-coordinator in namespace llm gives config/istio's names), with no Envoy Gateway object, and
 * points the coordinator's side calls at Istio's Service for the internal gateway.
 */
import fs from 'node:fs';
import path from 'node:path';
import yaml from 'js-yaml';
import { HELM, NAMESPACE, diffPaths, keyOf, normalise, render } from './helm-chart';
import { REPO_ROOT, type K8sObject, loadManifests } from './manifest-files';

const ISTIO_KINDS = new Set(['Gateway', 'HTTPRoute', 'EnvoyFilter', 'DestinationRule']);
const haveHelm = fs.existsSync(HELM);
const title = `the chart with gateways.provider istio${haveHelm ? '' : ' (skipped: .tools/bin/helm is absent; charts/install-tools.sh installs it)'}`;

const comparable = (o: K8sObject): K8sObject => {
  const n = normalise(o);
  delete n.metadata.labels;
  delete n.metadata.namespace;
  return n;
};

(haveHelm ? describe : describe.skip)(title, () => {
  jest.setTimeout(60_000);
  const objects = haveHelm ? render({ gateways: { provider: 'istio' } }, { namespace: NAMESPACE }) : [];

  it('renders config/istio object by object, field by field', () => {
    const chart = new Map(objects.filter((o) => ISTIO_KINDS.has(o.kind)).map((o) => [keyOf(o), comparable(o)]));
    const files = new Map(loadManifests(path.join(REPO_ROOT, 'config/istio')).map((m) => [keyOf(m.obj), comparable(m.obj)]));
    expect([...chart.keys()].sort()).toEqual([...files.keys()].sort());
    const diffs = [...files].flatMap(([k, o]) => diffPaths(o, chart.get(k)).map((d) => `${k} ${d}`));
    expect(diffs).toEqual([]);
  });

  it("renders no Envoy Gateway kind, and side calls go to Istio's Service for the internal gateway", () => {
    expect(objects.filter((o) => o.apiVersion.startsWith('gateway.envoyproxy.io/')).map(keyOf)).toEqual([]);
    const cm = objects.find((o) => o.kind === 'ConfigMap')!;
    const doc = yaml.load((cm['data'] as Record<string, string>)['coordinator.yaml']!) as { gateway: { address: string } };
    expect(doc.gateway.address).toBe(`http://epd-internal-istio.${NAMESPACE}.svc.cluster.local:8081`);
  });

  it('the default provider is still envoy-gateway: no Istio kind', () => {
    expect(
      render()
        .filter((o) => o.apiVersion.includes('istio.io'))
        .map(keyOf),
    ).toEqual([]);
  });
});
