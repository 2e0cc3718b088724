/**
 * Envoy Gateway's own controller without Kubernetes: `envoy-gateway server` with the File resource
 * provider (it watches a folder of manifests) and the Host infrastructure provider (it runs each
 * Gateway's Envoy as a child process through func-e).
 *
 * Nothing is downloaded: func-e's data home is seeded with the Envoy binary scripts/ensure-deps.sh
 * installs, under the version the EnvoyProxies pin. Status goes nowhere but the controller's log
 * (the File provider's status handler logs each update as YAML), so that is where it is read.
 */
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import yaml from 'js-yaml';
import { REPO_ROOT, type K8sObject } from '../manifests/manifest-files';
import { writeYaml } from '../manifests/egctl-translation';
import { startChild, type Child } from '../../../launch/supervise';
import { HOST_ENVOY_VERSION } from './standalone-resources';

export const ENVOY_GATEWAY = path.join(REPO_ROOT, '.tools/bin/envoy-gateway');
/**
 * Ports the controller binds whatever its config says (v1.9.0): xDS 18000 (on 0.0.0.0), admin
 * 19000, metrics 19001, Wasm cache 18002, the File provider's health probe 8081. One controller at
 * a time per machine.
 */
export const FIXED_PORTS: readonly number[] = [18000, 18002, 19000, 19001, 8081];

export interface ResourceStatus {
  readonly kind: string;
  /** `<namespace>/<name>`. */
  readonly key: string;
  readonly status: Record<string, unknown>;
}

export interface EnvoyGateway {
  readonly dir: string;
  readonly logPath: string;
  /** Every status the controller has logged so far, oldest first. */
  statuses(): ResourceStatus[];
  /** Replaces the watched resource file; the File provider reconciles on the change. */
  apply(resources: readonly K8sObject[]): void;
  /** The admin addresses of the Envoys the Host provider has started (func-e writes one per run). */
  envoyAdmins(): string[];
  stop(): Promise<void>;
}

const STATUS_LINE = /Got new status for (\S+)\n([\s\S]*?)\t\{"runner": "provider", "key": "([^"]+)"\}/g;

export function parseStatuses(log: string): ResourceStatus[] {
  const out: ResourceStatus[] = [];
  for (const m of log.matchAll(STATUS_LINE)) {
    out.push({ kind: m[1]!, key: m[3]!, status: (yaml.load(m[2]!) ?? {}) as Record<string, unknown> });
  }
  return out;
}

/** Conditions of type `type` in a policy/route status (`ancestors` or `parents`) or a plain one. */
export function conditionsOf(status: Record<string, unknown>, type: string): { status: string; reason: string; message?: string }[] {
  const groups = [
    ...((status['ancestors'] as Record<string, unknown>[]) ?? []),
    ...((status['parents'] as Record<string, unknown>[]) ?? []),
    status,
  ];
  return groups.flatMap((g) =>
    ((g['conditions'] as { type: string; status: string; reason: string; message?: string }[]) ?? []).filter((c) => c.type === type),
  );
}

function run(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}): ${r.stderr || r.error?.message}`);
}

export async function startEnvoyGateway(opts: { dir: string; envoy: string; resources: readonly K8sObject[] }): Promise<EnvoyGateway> {
  const home = (name: string) => {
    const p = path.join(opts.dir, name);
    fs.mkdirSync(p, { recursive: true });
    return p;
  };
  const [configHome, dataHome, stateHome, runtimeDir, watched] = ['config', 'data', 'state', 'run', 'resources'].map(home) as [
    string,
    string,
    string,
    string,
    string,
  ];
  // func-e's layout: <dataHome>/envoy-versions/<version>/bin/envoy; with it present nothing is fetched.
  const bin = path.join(dataHome, 'envoy-versions', HOST_ENVOY_VERSION, 'bin');
  fs.mkdirSync(bin, { recursive: true });
  fs.symlinkSync(opts.envoy, path.join(bin, 'envoy'));
  // The xDS server's and the Envoys' mTLS certificates, under <configHome>/certs.
  run(ENVOY_GATEWAY, ['certgen', '--local', '--config-home', configHome]);
  const configPath = path.join(opts.dir, 'envoy-gateway.yaml');
  fs.writeFileSync(
    configPath,
    yaml.dump({
      apiVersion: 'gateway.envoyproxy.io/v1alpha1',
      kind: 'EnvoyGateway',
      gateway: { controllerName: 'gateway.envoyproxy.io/gatewayclass-controller' },
      provider: {
        type: 'Custom',
        custom: {
          resource: { type: 'File', file: { paths: [watched] } },
          infrastructure: { type: 'Host', host: { configHome, dataHome, stateHome, runtimeDir } },
        },
      },
      logging: { level: { default: 'info' } },
      // Backend (the resource standing in for Services here) is off unless enabled.
      extensionApis: { enableBackend: true },
    }),
  );
  // The loader keeps one EnvoyProxy per file (gatewayapi/resource/load.go: "only support loading
  // one envoyproxy for now"; the last wins), so each EnvoyProxy gets a file of its own.
  const apply = (resources: readonly K8sObject[]) => {
    const files = new Map<string, K8sObject[]>([['resources.yaml', []]]);
    for (const o of resources) {
      if (o.kind === 'EnvoyProxy') files.set(`envoyproxy-${o.metadata.name}.yaml`, [o]);
      else files.get('resources.yaml')!.push(o);
    }
    for (const [name, objs] of files) {
      // Written beside and renamed, so the watcher never reads half a file.
      const tmp = path.join(opts.dir, `${name}.tmp`);
      writeYaml(tmp, objs);
      fs.renameSync(tmp, path.join(watched, name));
    }
  };
  apply(opts.resources);
  const logPath = path.join(opts.dir, 'envoy-gateway.log');
  const child: Child = await startChild({
    name: 'envoy-gateway',
    command: ENVOY_GATEWAY,
    args: ['server', '--config-path', configPath],
    logPath,
    ready: /start reconciling/,
    readyTimeoutMs: 60_000,
  });
  return {
    dir: opts.dir,
    logPath,
    statuses: () => parseStatuses(fs.existsSync(logPath) ? fs.readFileSync(logPath, 'utf8') : ''),
    apply,
    envoyAdmins: () =>
      fs
        .readdirSync(runtimeDir)
        .map((d) => path.join(runtimeDir, d, 'admin-address.txt'))
        .filter((f) => fs.existsSync(f))
        .map((f) => fs.readFileSync(f, 'utf8').trim())
        .filter((a) => a.length > 0),
    // The controller stops its Envoys when it is told to stop.
    stop: () => child.stop(15_000),
  };
}
