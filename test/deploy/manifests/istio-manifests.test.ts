/**
 * config/istio: the Istio objects against Istio's own CRD schemas (istio.io/api v1.32.0, copied into
 * .tools/crds by config/istio/install-tools.sh), the routes against config/k8s's, the filter order
 * the EnvoyFilter asks for, and its patch values loaded by Envoy (`envoy --mode validate`) on a
 * listener shaped like Istio's gateway listener (the EPP's ext_proc filter included).
 *
 * The patch is applied here by a few lines of our own (insert before the EPP filter, merge into the
 * HCM and the cluster): this proves the values are valid Envoy config, not how istiod applies them.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import yaml from 'js-yaml';
import { CrdCatalog, PROJECT_CRDS_ABSENT, projectCrdsDir } from './crd-catalog';
import { envoyBinary } from './egctl-translation';
import {
  METADATA_KEYS,
  REPO_ROOT,
  findObject,
  loadManifests,
  manifestFileNames,
  readKustomization,
  type K8sObject,
} from './manifest-files';
import { envoyValidate } from '../envoy-validate';

type Json = Record<string, unknown>;

const ISTIO_DIR = path.join(REPO_ROOT, 'config/istio');
const ISTIO_CRDS_DIR = path.join(REPO_ROOT, '.tools/crds/istio-api-v1.32.0');
const EPP_FILTER = 'envoy.filters.http.ext_proc';
const HCM = 'envoy.filters.network.http_connection_manager';

const istio = loadManifests(ISTIO_DIR);
const k8s = loadManifests();

interface Patch {
  applyTo: string;
  match: { context: string; listener?: { filterChain: { filter: { name: string; subFilter?: { name: string } } } }; cluster?: Json };
  patch: { operation: string; value: Json };
}
const patches = (): Patch[] => (findObject(istio, 'EnvoyFilter', 'epd-coordinator')['spec'] as { configPatches: Patch[] }).configPatches;
const inserted = () => patches().filter((p) => p.applyTo === 'HTTP_FILTER');

describe('config/istio', () => {
  it('the kustomization lists every file', () => {
    expect([...readKustomization(ISTIO_DIR).resources].sort()).toEqual(manifestFileNames(ISTIO_DIR));
  });

  it("the routes are config/k8s's epd-inference and epd-side-calls, unchanged (one path allow-list)", () => {
    for (const name of ['epd-inference', 'epd-side-calls']) {
      expect(findObject(istio, 'HTTPRoute', name)).toEqual(findObject(k8s, 'HTTPRoute', name));
    }
  });

  it("inserts the header strip and then the coordinator, both before Istio's EPP ext_proc filter, under names of their own", () => {
    const ins = inserted();
    expect(
      ins.map((p) => [
        p.match.context,
        p.match.listener?.filterChain.filter.name,
        p.match.listener?.filterChain.filter.subFilter?.name,
        p.patch.operation,
      ]),
    ).toEqual([
      ['GATEWAY', HCM, EPP_FILTER, 'INSERT_BEFORE'],
      ['GATEWAY', HCM, EPP_FILTER, 'INSERT_BEFORE'],
    ]);
    expect(ins.map((p) => p.patch.value['name'])).toEqual(['epd-strip-routing-headers', 'epd-coordinator']);
    const gw = findObject(istio, 'EnvoyFilter', 'epd-coordinator')['spec'] as { targetRefs: Json[] };
    expect(gw.targetRefs).toEqual([{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'inference-gateway' }]);
  });

  it("the coordinator's cluster is the DestinationRule's host, as Istio names it", () => {
    const filter = inserted()[1]!.patch.value as { typed_config: { grpc_service: { envoy_grpc: { cluster_name: string } } } };
    const host = (findObject(istio, 'DestinationRule', 'epd-coordinator')['spec'] as { host: string }).host;
    expect(filter.typed_config.grpc_service.envoy_grpc.cluster_name).toBe(`outbound|50051||${host}`);
    const cluster = patches().find((p) => p.applyTo === 'CLUSTER')!;
    expect(cluster.match.cluster).toEqual({ service: host, portNumber: 50051 });
  });

  it('the access log prints every dynamic-metadata key the coordinator writes', () => {
    const hcm = patches().find((p) => p.applyTo === 'NETWORK_FILTER')!.patch.value as {
      typed_config: { access_log: { typed_config: { log_format: { json_format: Record<string, string> } } }[] };
    };
    const fmt = hcm.typed_config.access_log[0]!.typed_config.log_format.json_format;
    for (const key of METADATA_KEYS) expect(fmt[key]).toBe(`%DYNAMIC_METADATA(epd.coordinator:${key})%`);
  });
});

const projectCrds = projectCrdsDir();
const haveIstioCrds = fs.existsSync(ISTIO_CRDS_DIR);
const crdsAbsent = [
  haveIstioCrds ? '' : `${ISTIO_CRDS_DIR} is absent; config/istio/install-tools.sh copies Istio's`,
  projectCrds ? '' : PROJECT_CRDS_ABSENT,
].filter(Boolean);
const crdTitle = `config/istio against Istio's CRD schemas (istio.io/api v1.32.0) and the Gateway API's${
  crdsAbsent.length ? ` (skipped: ${crdsAbsent.join('; ')})` : ''
}`;
(crdsAbsent.length ? describe.skip : describe)(crdTitle, () => {
  const catalog = projectCrds && haveIstioCrds ? CrdCatalog.load([projectCrds, ISTIO_CRDS_DIR]) : undefined;
  it.each(istio.map((m) => [`${m.where} ${m.obj.kind}/${m.obj.metadata.name}`, m.obj] as const))('%s validates', (_label, obj) => {
    const crd = catalog!.find(obj.apiVersion, obj.kind);
    expect(crd?.served).toBe(true);
    expect(catalog!.validate(obj)).toEqual([]);
  });
});

/** A listener as Istio builds a Gateway API gateway's (HCM, the EPP filter Istio adds, router), our patches applied. */
function patchedIstioLikeBootstrap(all: readonly { obj: K8sObject }[] = istio): Json {
  const eppFilter = {
    name: EPP_FILTER,
    typed_config: {
      '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
      grpc_service: { envoy_grpc: { cluster_name: 'dummy' }, timeout: '10s' },
      failure_mode_allow: true,
      processing_mode: { request_header_mode: 'SKIP', response_header_mode: 'SKIP' },
      message_timeout: '1000s',
    },
  };
  const filters: Json[] = [
    eppFilter,
    { name: 'envoy.filters.http.router', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' } },
  ];
  const spec = findObject(all as never, 'EnvoyFilter', 'epd-coordinator')['spec'] as { configPatches: Patch[] };
  let hcm: Json = {
    '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
    stat_prefix: 'outbound_0.0.0.0_80',
    route_config: {
      name: 'http.80',
      virtual_hosts: [{ name: 'all', domains: ['*'], routes: [{ match: { prefix: '/' }, route: { cluster: 'decode' } }] }],
    },
  };
  const cluster = (name: string): Json => ({
    name,
    type: 'STATIC',
    connect_timeout: '1s',
    typed_extension_protocol_options: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
        '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
        explicit_http_config: { http2_protocol_options: {} },
      },
    },
    load_assignment: {
      cluster_name: name,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: 1 } } } }] }],
    },
  });
  const coordinator = cluster('outbound|50051||epd-coordinator.llm.svc.cluster.local');
  for (const p of spec.configPatches) {
    if (p.applyTo === 'HTTP_FILTER')
      filters.splice(
        filters.findIndex((f) => f['name'] === p.match.listener!.filterChain.filter.subFilter!.name),
        0,
        p.patch.value,
      );
    if (p.applyTo === 'NETWORK_FILTER') hcm = { ...hcm, ...((p.patch.value['typed_config'] as Json) ?? {}) };
    if (p.applyTo === 'CLUSTER') Object.assign(coordinator, p.patch.value);
  }
  return {
    static_resources: {
      listeners: [
        {
          name: '0.0.0.0_80',
          address: { socket_address: { address: '127.0.0.1', port_value: 0 } },
          filter_chains: [{ filters: [{ name: HCM, typed_config: { ...hcm, http_filters: filters } }] }],
        },
      ],
      clusters: [coordinator, cluster('dummy'), cluster('decode')],
    },
  };
}

const envoy = envoyBinary();
(envoy ? describe : describe.skip)(
  `the EnvoyFilter's values in Envoy${envoy ? '' : ' (skipped: no Envoy; scripts/ensure-deps.sh installs it)'}`,
  () => {
    it("a listener shaped like Istio's gateway listener, with the patches, passes envoy --mode validate; the chain is strip -> coordinator -> EPP -> router", () => {
      const boot = patchedIstioLikeBootstrap();
      const hcm = (
        boot['static_resources'] as { listeners: { filter_chains: { filters: { typed_config: { http_filters: Json[] } }[] }[] }[] }
      ).listeners[0]!.filter_chains[0]!.filters[0]!.typed_config;
      expect(hcm.http_filters.map((f) => f['name'])).toEqual([
        'epd-strip-routing-headers',
        'epd-coordinator',
        EPP_FILTER,
        'envoy.filters.http.router',
      ]);
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-istio-validate-'));
      try {
        const file = path.join(dir, 'envoy.yaml');
        fs.writeFileSync(file, yaml.dump(boot, { noRefs: true }));
        const r = envoyValidate(envoy!, file);
        expect({ status: r.status, log: r.status === 0 ? '' : r.log }).toEqual({ status: 0, log: '' });
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  },
);
