/**
 * config/k8s as Envoy Gateway's standalone mode (File resource provider, Host infrastructure) can
 * serve it: the same Gateways, routes, policies and EnvoyProxies, with loopback `Backend`s where the
 * cluster would have Services and an InferencePool, and the Host provider pinned to our Envoy.
 *
 * Derived from the manifests rather than copied, so the controller test follows every change to
 * config/k8s. What differs, and why:
 * - InferencePool backends: standalone mode has no InferencePool (no extension server, no EPP). A
 *   rule routed by `epp-profile` (the side-call route) becomes one rule per role, each to that
 *   role's Backend; every other rule goes to the decode Backend, which is where the EPP sends a
 *   request the coordinator marked `EPP-Profile: decode`.
 * - The coordinator's Service becomes a Backend with `appProtocols: [gateway.envoyproxy.io/h2c]`
 *   (a Service port says so with `appProtocol`; a Backend has no other way to ask for HTTP/2).
 * - Gateway listener ports: free loopback ports instead of 80/8081 (the Host provider binds them
 *   on this machine, not in a pod).
 * - EnvoyProxy: `provider: Host` with `envoyVersion`, `--disable-hot-restart`; the access log goes
 *   to a file per proxy.
 */
import type { K8sObject } from '../manifests/manifest-files';

export const STANDALONE_NAMESPACE = 'default';
/** The Envoy version the Host provider runs; its binary is seeded into func-e's data home. */
export const HOST_ENVOY_VERSION = '1.40.0';

export type WorkerRole = 'encode' | 'prefill' | 'decode';

export interface StandaloneTargets {
  /** Listener port per Gateway name. */
  readonly gatewayPorts: Readonly<Record<string, number>>;
  /** The coordinator's ext_proc gRPC port on 127.0.0.1. */
  readonly coordinatorPort: number;
  /** Each worker role's port on 127.0.0.1. */
  readonly workers: Readonly<Record<WorkerRole, number>>;
  /** Access-log file per EnvoyProxy name. */
  readonly accessLogs: Readonly<Record<string, string>>;
}

type Json = Record<string, unknown>;
type BackendRef = Json & { kind?: string; name?: string; group?: string };
type Rule = Json & { matches?: Json[]; backendRefs?: BackendRef[] };

/** Kinds a cluster needs that standalone mode replaces (Services) or cannot run (pods). */
const REPLACED_KINDS = new Set([
  'ConfigMap',
  'Deployment',
  'Service',
  'ServiceAccount',
  'PodDisruptionBudget',
  'InferencePool',
  'HorizontalPodAutoscaler',
]);

export const backendName = (role: WorkerRole): string => `epd-worker-${role}`;
export const COORDINATOR_BACKEND = 'epd-coordinator';

function backend(name: string, port: number, appProtocols?: string[]): K8sObject {
  return {
    apiVersion: 'gateway.envoyproxy.io/v1alpha1',
    kind: 'Backend',
    metadata: { name, namespace: STANDALONE_NAMESPACE },
    spec: { endpoints: [{ ip: { address: '127.0.0.1', port } }], ...(appProtocols ? { appProtocols } : {}) },
  };
}

const backendRef = (name: string): BackendRef => ({ group: 'gateway.envoyproxy.io', kind: 'Backend', name });

/** The role a header match selects (`epp-profile: <role>`), if the match is only that. */
function roleOf(match: Json): WorkerRole | undefined {
  const headers = match['headers'] as { name: string; value: string }[] | undefined;
  if (!headers || headers.length !== 1 || match['path']) return undefined;
  const h = headers[0]!;
  return h.name.toLowerCase() === 'epp-profile' && ['encode', 'prefill', 'decode'].includes(h.value) ? (h.value as WorkerRole) : undefined;
}

function rewriteRules(rules: Rule[]): Rule[] {
  const out: Rule[] = [];
  for (const rule of rules) {
    const pooled = (rule.backendRefs ?? []).some((b) => b.kind === 'InferencePool');
    if (!pooled) {
      out.push(rule);
      continue;
    }
    const roles = (rule.matches ?? []).map(roleOf);
    if (roles.length > 0 && roles.every((r) => r !== undefined)) {
      rule.matches!.forEach((m, i) => {
        const role = roles[i]!;
        out.push({
          ...structuredClone(rule),
          name: `${String(rule['name'] ?? 'rule')}-${role}`,
          matches: [m],
          backendRefs: [backendRef(backendName(role))],
        });
      });
    } else {
      out.push({ ...rule, backendRefs: [backendRef(backendName('decode'))] });
    }
  }
  return out;
}

function rewriteEnvoyProxy(o: K8sObject, accessLog: string | undefined): void {
  const spec = o['spec'] as Json & { telemetry?: { accessLog?: { settings?: { sinks?: Json[] }[] } } };
  spec['provider'] = { type: 'Host', host: { envoyVersion: HOST_ENVOY_VERSION } };
  // The Host provider starts every Envoy with base id 0: the second Gateway's Envoy (or any other
  // Envoy on the machine) would fail on the hot-restart socket. A pod has one Envoy; a host does not.
  spec['extraArgs'] = [...((spec['extraArgs'] as string[] | undefined) ?? []), '--disable-hot-restart'];
  for (const s of spec.telemetry?.accessLog?.settings ?? []) {
    for (const sink of s.sinks ?? []) {
      if (sink['type'] === 'File' && accessLog) sink['file'] = { path: accessLog };
    }
  }
}

/** The standalone resource set: a GatewayClass, config/k8s rewritten as above, and the Backends. */
export function standaloneResources(manifests: readonly K8sObject[], t: StandaloneTargets): K8sObject[] {
  const out: K8sObject[] = [];
  const classes = new Set<string>();
  for (const src of manifests) {
    if (REPLACED_KINDS.has(src.kind)) continue;
    const o = structuredClone(src);
    o.metadata.namespace = STANDALONE_NAMESPACE;
    const spec = o['spec'] as Json;
    switch (o.kind) {
      case 'Gateway': {
        classes.add(String(spec['gatewayClassName']));
        const port = t.gatewayPorts[o.metadata.name];
        if (port === undefined) throw new Error(`no port given for Gateway ${o.metadata.name}`);
        for (const l of spec['listeners'] as Json[]) l['port'] = port;
        break;
      }
      case 'HTTPRoute':
        spec['rules'] = rewriteRules(spec['rules'] as Rule[]);
        break;
      case 'EnvoyExtensionPolicy':
        for (const p of spec['extProc'] as { backendRefs: BackendRef[] }[]) p.backendRefs = [backendRef(COORDINATOR_BACKEND)];
        break;
      case 'EnvoyProxy':
        rewriteEnvoyProxy(o, t.accessLogs[o.metadata.name]);
        break;
    }
    out.push(o);
  }
  for (const name of classes) {
    out.unshift({
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'GatewayClass',
      metadata: { name },
      spec: { controllerName: 'gateway.envoyproxy.io/gatewayclass-controller' },
    });
  }
  out.push(backend(COORDINATOR_BACKEND, t.coordinatorPort, ['gateway.envoyproxy.io/h2c']));
  for (const role of ['encode', 'prefill', 'decode'] as const) out.push(backend(backendName(role), t.workers[role]));
  return out;
}
