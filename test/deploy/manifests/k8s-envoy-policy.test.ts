/**
 * config/k8s carries the Envoy policy of launch/envoy-policy.ts, as Envoy Gateway expresses it:
 * graceful ext_proc close in both EnvoyProxy bootstraps (a Merge of one runtime layer), the worker
 * legs' idle timeout and never-sent retries (BackendTrafficPolicy on both worker routes), and the
 * coordinator's health check, whose detection time the pod's preStop sleep covers.
 */
import yaml from 'js-yaml';
import {
  GRACEFUL_CLOSE,
  DRAIN_DELAY_SECONDS,
  HEALTH_DETECTION_SECONDS,
  SERVICE_HEALTH_CHECK,
  SERVICE_OUTLIER_DETECTION,
  WORKER_IDLE_TIMEOUT_SECONDS,
  WORKER_RETRY,
} from '../../../launch/envoy-policy';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadManifests, objectsOf, findObject, type K8sObject } from './manifest-files';
import { EGCTL, clustersOf, routeConfigsOf, translate, translationInput, walkObjects, writeYaml } from './egctl-translation';

type Json = Record<string, any>;

const manifests = loadManifests();

describe('config/k8s: the Envoy policy of launch/envoy-policy.ts', () => {
  test('every EnvoyProxy merges a runtime layer that turns graceful ext_proc close on', () => {
    const proxies = objectsOf<K8sObject & { spec: Json }>(manifests, 'EnvoyProxy');
    expect(proxies.length).toBeGreaterThanOrEqual(2);
    for (const p of proxies) {
      const boot = p.spec['bootstrap'] as { type: string; value: string };
      expect({ name: p.metadata.name, type: boot.type }).toEqual({ name: p.metadata.name, type: 'Merge' });
      const layers = (yaml.load(boot.value) as Json)['layered_runtime']['layers'] as Json[];
      expect(layers.map((l) => l['static_layer'][GRACEFUL_CLOSE.runtimeKey])).toEqual([true]);
    }
  });

  test('the worker routes: idle timeout below the keep-alive, retries only for what no worker received', () => {
    const btp = findObject<K8sObject & { spec: Json }>(manifests, 'BackendTrafficPolicy', 'epd-coordinator-worker-connections');
    const routes = objectsOf<K8sObject & { spec: Json }>(manifests, 'HTTPRoute').filter((r) =>
      (r.spec['rules'] as Json[]).some((rule) => (rule['backendRefs'] ?? []).some((b: Json) => b['kind'] === 'InferencePool')),
    );
    expect(btp.spec['targetRefs'].map((t: Json) => t['name']).sort()).toEqual(routes.map((r) => r.metadata.name).sort());
    expect(btp.spec['timeout']).toEqual({ http: { connectionIdleTimeout: `${WORKER_IDLE_TIMEOUT_SECONDS}s` } });
    expect(btp.spec['retry']).toEqual({ numRetries: WORKER_RETRY.numRetries, retryOn: { triggers: [...WORKER_RETRY.retryOn] } });
  });

  test("the coordinator's health check and outlier detection; the preStop sleep outlasts the detection", () => {
    const policy = findObject<K8sObject & { spec: Json }>(manifests, 'EnvoyExtensionPolicy', 'epd-coordinator');
    const hc = policy.spec['extProc'][0]['backendSettings']['healthCheck'];
    const h = SERVICE_HEALTH_CHECK;
    expect(hc['active']).toEqual({
      type: 'GRPC',
      grpc: { service: h.service },
      interval: `${h.intervalSeconds}s`,
      timeout: `${h.timeoutSeconds}s`,
      unhealthyThreshold: h.unhealthyThreshold,
      healthyThreshold: h.healthyThreshold,
    });
    const o = SERVICE_OUTLIER_DETECTION;
    expect(hc['passive']).toEqual({
      splitExternalLocalOriginErrors: true,
      consecutiveLocalOriginFailures: o.consecutiveLocalOriginFailure,
      interval: `${o.intervalSeconds}s`,
      baseEjectionTime: `${o.baseEjectionSeconds}s`,
      maxEjectionPercent: o.maxEjectionPercent,
    });
    const deployment = findObject<K8sObject & { spec: Json }>(manifests, 'Deployment', 'epd-coordinator');
    const preStop = deployment.spec['template']['spec']['containers'][0]['lifecycle']['preStop']['sleep']['seconds'];
    expect(preStop).toBeGreaterThanOrEqual(DRAIN_DELAY_SECONDS);
    expect(DRAIN_DELAY_SECONDS).toBeGreaterThan(HEALTH_DETECTION_SECONDS);
  });
});

const haveEgctl = fs.existsSync(EGCTL);
const egTitle = 'the same policy in what Envoy Gateway makes of config/k8s (egctl x translate)';

(haveEgctl ? describe : describe.skip)(
  haveEgctl ? egTitle : `${egTitle} (skipped: .tools/bin/egctl is absent; run config/k8s/verify-egctl.sh)`,
  () => {
    let xds: Record<string, { configs: Json[] }>;
    beforeAll(() => {
      const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-egctl-policy-'));
      try {
        const file = path.join(tmp, 'in.yaml');
        writeYaml(file, translationInput());
        xds = translate(file).xds;
      } finally {
        fs.rmSync(tmp, { recursive: true, force: true });
      }
    }, 90_000);

    test('both Gateways: the runtime layer is merged into the bootstrap, the worker clusters close idle connections, the worker routes retry', () => {
      expect(Object.keys(xds).length).toBe(2);
      for (const [gateway, dump] of Object.entries(xds)) {
        const boot = dump.configs.find((c) => String(c['@type']).endsWith('.BootstrapConfigDump'))!;
        const layers = boot['bootstrap']['layeredRuntime']['layers'] as Json[];
        expect({
          gateway,
          graceful: layers.map((l) => l['staticLayer'][GRACEFUL_CLOSE.runtimeKey]).filter((v) => v !== undefined),
        }).toEqual({
          gateway,
          graceful: [true],
        });
        const workers = (clustersOf(dump) as Json[]).filter((c) => String(c['name']).startsWith('httproute/'));
        expect(workers.length).toBeGreaterThan(0);
        for (const c of workers) {
          const opts = c['typedExtensionProtocolOptions']['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
          expect({ cluster: c['name'], idle: opts['commonHttpProtocolOptions']['idleTimeout'] }).toEqual({
            cluster: c['name'],
            idle: `${WORKER_IDLE_TIMEOUT_SECONDS}s`,
          });
        }
        const retries = routeConfigsOf(dump)
          .flatMap((rc) => [...walkObjects(rc)] as Json[])
          .filter((o) => o['route'] && o['route']['cluster'] && String(o['route']['cluster']).startsWith('httproute/'))
          .map((o) => o['route']['retryPolicy']);
        expect(retries.length).toBeGreaterThan(0);
        for (const r of retries) {
          expect(r['retryOn'].split(',').sort()).toEqual([...WORKER_RETRY.retryOn].sort());
          expect(r['numRetries']).toBe(WORKER_RETRY.numRetries);
        }
      }
    });
  },
);
