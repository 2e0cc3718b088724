/**
 * One policy, every gateway: envoy/envoy.yaml, config/k8s (Envoy Gateway), config/istio and
 * config/gke read back into launch/ext-proc-policy.ts's and launch/envoy-policy.ts's terms: the
 * processing mode, timeouts, failure handling, metadata namespace, the path allow-list, the graceful
 * ext_proc close and the service's health check. The chart is held to config/k8s
 * (helm-chart.test.ts, field by field) and to config/istio (helm-istio.test.ts), so it follows too.
 */
import fs from 'node:fs';
import path from 'node:path';
import yaml from 'js-yaml';
import { EXT_PROC_POLICY, type ProcessingModePolicy } from '../../../launch/ext-proc-policy';
import { GRACEFUL_CLOSE, SERVICE_HEALTH_CHECK, SERVICE_OUTLIER_DETECTION } from '../../../launch/envoy-policy';
import { allowedMatches } from '../../../launch/path-policy';
import { REPO_ROOT, findObject, loadManifests, objectsOf, type K8sObject } from './manifest-files';
import { walkObjects } from './egctl-translation';

type Json = Record<string, any>;

const seconds = (d: string): number => {
  const m = /^(\d+)(ms|s|m)$/.exec(d);
  if (!m) throw new Error(`not a duration: ${d}`);
  return Number(m[1]) * (m[2] === 'ms' ? 0.001 : m[2] === 'm' ? 60 : 1);
};

/** What each gateway expresses, in launch/ext-proc-policy.ts's shape. */
interface Expressed {
  mode: ProcessingModePolicy;
  messageTimeoutSeconds: number;
  failClosed: boolean;
  metadataNamespaces: string[];
  streamIdleTimeoutSeconds: number;
}

/** An Envoy ExternalProcessor config (snake_case), as envoy/ and the Istio EnvoyFilter write it. */
function fromEnvoyFilter(f: Json, streamIdle: string): Expressed {
  const m = f['processing_mode'];
  return {
    mode: {
      requestHeaders: m.request_header_mode,
      requestBody: m.request_body_mode,
      requestTrailers: m.request_trailer_mode,
      responseHeaders: m.response_header_mode,
      responseBody: m.response_body_mode,
      responseTrailers: m.response_trailer_mode,
    },
    messageTimeoutSeconds: seconds(f['message_timeout']),
    failClosed: f['failure_mode_allow'] === false,
    metadataNamespaces: f['metadata_options'].receiving_namespaces.untyped,
    streamIdleTimeoutSeconds: seconds(streamIdle),
  };
}

const expected: Expressed = {
  mode: EXT_PROC_POLICY.mode,
  messageTimeoutSeconds: EXT_PROC_POLICY.messageTimeoutSeconds,
  failClosed: EXT_PROC_POLICY.failClosed,
  metadataNamespaces: [EXT_PROC_POLICY.metadataNamespace],
  streamIdleTimeoutSeconds: EXT_PROC_POLICY.streamIdleTimeoutSeconds,
};

const k8s = loadManifests();
const istio = loadManifests(path.join(REPO_ROOT, 'config/istio'));
const gke = loadManifests(path.join(REPO_ROOT, 'config/gke'));
const envoyDoc = yaml.load(fs.readFileSync(path.join(REPO_ROOT, 'envoy/envoy.yaml'), 'utf8')) as Json;
const envoyPublic = (envoyDoc['static_resources'].listeners as Json[]).find((l) => l['name'] === 'public')!;
const envoyHcm = [...walkObjects(envoyPublic)].find((o) => Array.isArray(o['http_filters']))!;
const istioPatches = (findObject(istio, 'EnvoyFilter', 'epd-coordinator')['spec'] as { configPatches: Json[] }).configPatches;
const istioFilter = istioPatches.find((p) => p['patch'].value.name === 'epd-coordinator')!['patch'].value.typed_config;
const istioHcm = istioPatches.find((p) => p['applyTo'] === 'NETWORK_FILTER')!['patch'].value.typed_config;

describe('one ext_proc policy across envoy/, config/k8s, config/istio and config/gke (launch/ext-proc-policy.ts)', () => {
  it('envoy/envoy.yaml', () => {
    const filter = (envoyHcm['http_filters'] as Json[]).find((f) => f['name'] === 'epd-coordinator')!['typed_config'];
    expect(fromEnvoyFilter(filter, String(envoyHcm['stream_idle_timeout']))).toEqual(expected);
  });

  it('config/k8s: the EnvoyExtensionPolicy (full duplex request, no response block) and the ClientTrafficPolicy', () => {
    const p = (findObject(k8s, 'EnvoyExtensionPolicy', 'epd-coordinator')['spec'] as Json).extProc[0];
    const ctp = findObject(k8s, 'ClientTrafficPolicy', 'inference-gateway-clients')['spec'] as Json;
    // Envoy Gateway sends request headers always, trailers with a full-duplex body, and skips the
    // response when the policy has no `response` block.
    expect(p.processingMode.response).toBeUndefined();
    expect({
      mode: {
        requestHeaders: 'SEND',
        requestBody: ({ FullDuplexStreamed: 'FULL_DUPLEX_STREAMED', Buffered: 'BUFFERED', Streamed: 'STREAMED' } as Json)[
          p.processingMode.request.body
        ],
        requestTrailers: p.processingMode.request.body === 'FullDuplexStreamed' ? 'SEND' : 'SKIP',
        responseHeaders: 'SKIP',
        responseBody: 'NONE',
        responseTrailers: 'SKIP',
      },
      messageTimeoutSeconds: seconds(p.messageTimeout),
      failClosed: p.failOpen === false,
      metadataNamespaces: p.metadata.writableNamespaces,
      streamIdleTimeoutSeconds: seconds(ctp.timeout.http.streamIdleTimeout),
    }).toEqual(expected);
    expect(p.statusOnError).toBe(EXT_PROC_POLICY.statusOnError);
  });

  it('config/istio: the EnvoyFilter', () => {
    expect(fromEnvoyFilter(istioFilter, istioHcm.stream_idle_timeout)).toEqual(expected);
    expect(istioFilter.status_on_error).toEqual({ code: EXT_PROC_POLICY.statusOnError });
  });

  it('config/gke: the GCPRoutingExtension (full duplex request with trailers; the response is not sent; fail closed)', () => {
    const ext = (findObject(gke, 'GCPRoutingExtension', 'epd-coordinator')['spec'] as Json).extensionChains[0].extensions[0];
    const events = new Set<string>(ext.supportedEvents);
    expect({
      requestHeaders: events.has('RequestHeaders') ? 'SEND' : 'SKIP',
      requestBody: ext.requestBodySendMode === 'FullDuplexStreamed' && events.has('RequestBody') ? 'FULL_DUPLEX_STREAMED' : 'NONE',
      requestTrailers: events.has('RequestTrailers') ? 'SEND' : 'SKIP',
      responseHeaders: events.has('ResponseHeaders') ? 'SEND' : 'SKIP',
      responseBody: events.has('ResponseBody') ? 'STREAMED' : 'NONE',
      responseTrailers: events.has('ResponseTrailers') ? 'SEND' : 'SKIP',
    }).toEqual(EXT_PROC_POLICY.mode);
    expect(ext.failOpen).toBe(false);
  });
});

describe('the path allow-list (launch/path-policy.ts) on every gateway', () => {
  const key = (m: { path: string } | { prefix: string }) => ('path' in m ? `=${m.path}` : `^${m.prefix}`);
  const allowed = allowedMatches().map(key).sort();
  /** Gateway API matches: PathPrefix /x covers /x and /x/..., the same as Envoy's prefix /x/ plus path /x. */
  const routeMatches = (all: readonly { obj: K8sObject }[]) => {
    const route = findObject(all as never, 'HTTPRoute', 'epd-inference')['spec'] as {
      rules: { matches: { path: { type: string; value: string } }[] }[];
    };
    return route.rules
      .flatMap((r) => r.matches)
      .map((m) => (m.path.type === 'Exact' ? `=${m.path.value}` : `^${m.path.value}/`))
      .sort();
  };
  it('envoy/envoy.yaml public routes', () => {
    const vh = [...walkObjects(envoyPublic)].find((o) => Array.isArray(o['routes']))!;
    // Routed ones only: the catch-all `/` is the refused paths' direct 404.
    const ms = (vh['routes'] as Json[]).filter((r) => r['route'] !== undefined).map((r) => r['match']);
    expect(ms.map(key).sort()).toEqual(allowed);
  });
  it.each([
    ['config/k8s', k8s],
    ['config/istio', istio],
    ['config/gke', gke],
  ] as const)('%s epd-inference', (_name, all) => {
    expect(routeMatches(all)).toEqual(allowed);
  });
});

describe('graceful ext_proc close and the service health check (launch/envoy-policy.ts) on every gateway', () => {
  it('the graceful-close runtime flag: envoy/, every config/k8s EnvoyProxy, both Istio gateways', () => {
    expect(envoyDoc['layered_runtime'].layers[0].static_layer[GRACEFUL_CLOSE.runtimeKey]).toBe(true);
    for (const p of objectsOf<K8sObject & { spec: Json }>(k8s, 'EnvoyProxy')) {
      expect((yaml.load(p.spec['bootstrap'].value) as Json)['layered_runtime'].layers[0].static_layer[GRACEFUL_CLOSE.runtimeKey]).toBe(
        true,
      );
    }
    const gws = objectsOf<K8sObject & { spec: Json }>(istio, 'Gateway');
    expect(gws).toHaveLength(2);
    for (const g of gws) {
      const pc = JSON.parse(g.spec['infrastructure'].annotations['proxy.istio.io/config']) as { runtimeValues: Record<string, string> };
      expect(pc.runtimeValues[GRACEFUL_CLOSE.runtimeKey]).toBe('true');
    }
  });

  it('the grpc.health.v1 check: envoy/, config/k8s, config/istio, config/gke', () => {
    const h = SERVICE_HEALTH_CHECK;
    const want = {
      interval: h.intervalSeconds,
      timeout: h.timeoutSeconds,
      unhealthy: h.unhealthyThreshold,
      healthy: h.healthyThreshold,
      service: h.service,
    };
    const envoyCluster = (envoyDoc['static_resources'].clusters as Json[]).find((c) => c['name'] === 'epd_coordinator')!;
    const fromEnvoy = (hc: Json) => ({
      interval: seconds(hc.interval),
      timeout: seconds(hc.timeout),
      unhealthy: hc.unhealthy_threshold,
      healthy: hc.healthy_threshold,
      service: hc.grpc_health_check.service_name,
    });
    expect(fromEnvoy(envoyCluster['health_checks'][0])).toEqual(want);
    const istioCluster = istioPatches.find((p) => p['applyTo'] === 'CLUSTER')!['patch'].value;
    expect(fromEnvoy(istioCluster.health_checks[0])).toEqual(want);
    const eg = (findObject(k8s, 'EnvoyExtensionPolicy', 'epd-coordinator')['spec'] as Json).extProc[0].backendSettings.healthCheck.active;
    expect({
      interval: seconds(eg.interval),
      timeout: seconds(eg.timeout),
      unhealthy: eg.unhealthyThreshold,
      healthy: eg.healthyThreshold,
      service: eg.grpc.service,
    }).toEqual(want);
    const g = (findObject(gke, 'HealthCheckPolicy', 'epd-coordinator')['spec'] as Json).default;
    expect({
      interval: g.checkIntervalSec,
      timeout: g.timeoutSec,
      unhealthy: g.unhealthyThreshold,
      healthy: g.healthyThreshold,
      service: g.config.grpcHealthCheck.grpcServiceName,
    }).toEqual(want);
  });

  it("outlier detection: config/istio's DestinationRule has launch/envoy-policy.ts's", () => {
    const o = SERVICE_OUTLIER_DETECTION;
    const dr = (findObject(istio, 'DestinationRule', 'epd-coordinator')['spec'] as Json).trafficPolicy.outlierDetection;
    expect({
      consecutive: dr.consecutiveLocalOriginFailures,
      interval: seconds(dr.interval),
      ejection: seconds(dr.baseEjectionTime),
      max: dr.maxEjectionPercent,
      split: dr.splitExternalLocalOriginErrors,
    }).toEqual({
      consecutive: o.consecutiveLocalOriginFailure,
      interval: o.intervalSeconds,
      ejection: o.baseEjectionSeconds,
      max: o.maxEjectionPercent,
      split: true,
    });
  });
});
