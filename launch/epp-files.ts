/**
 * The two files the llm-d EPP reads in the no-Kubernetes topology (launch/epp-topology.ts): the
 * endpoints file of its file discovery and its `EndpointPickerConfig`. Also the input checks every
 * topology file shares (a bad port, address or path is a TopologyError, before anything is written).
 */
import { isIPv4 } from 'node:net';
import yaml from 'js-yaml';

export type WorkerRole = 'encode' | 'prefill' | 'decode';
export const WORKER_ROLES: readonly WorkerRole[] = ['encode', 'prefill', 'decode'];
export const ROLE_LABEL = 'llm-d.ai/role';

export interface WorkerEndpoint {
  /** Unique within the file, e.g. `sim-decode-0` or the Slurm task name. */
  readonly name: string;
  readonly role: WorkerRole;
  /** IPv4 literal (the EPP's file discovery accepts nothing else). */
  readonly address: string;
  readonly port: number;
  /** Extra labels, e.g. the job id. */
  readonly labels?: Readonly<Record<string, string>>;
}

export interface EppConfigOptions {
  /** Absolute path of the endpoints file, as the EPP will open it. */
  readonly endpointsPath: string;
  /** Re-read the file on change. The seed's launcher writes it once: default false. */
  readonly watchFile?: boolean;
  /**
   * `approx-prefix-cache-producer` + `prefix-cache-scorer` on the decode profile. Without them every
   * `Prefer: if-available` probe is a 412 (the EPP has no match info). Default true.
   */
  readonly prefixCache?: boolean;
}

export class TopologyError extends Error {
  override readonly name = 'TopologyError';
}

const NAME = /^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/;
const LABEL_KEY = /^([a-z0-9.-]{1,253}\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;

export function checkPort(what: string, port: number): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new TopologyError(`${what}: expected a port 1-65535, got ${String(port)}`);
  return port;
}

export function hostPort(what: string, value: string): { host: string; port: number } {
  const m = /^([0-9.]+):(\d{1,5})$/.exec(value);
  if (!m || !isIPv4(m[1]!)) throw new TopologyError(`${what}: expected "ipv4:port", got ${JSON.stringify(value)}`);
  return { host: m[1]!, port: checkPort(what, Number(m[2])) };
}

export function checkFilePath(what: string, path: string): string {
  if (path.length === 0 || /[\n\r\0]/.test(path)) throw new TopologyError(`${what}: expected a file path, got ${JSON.stringify(path)}`);
  return path;
}

/** The endpoints file (`endpoints: [...]`), YAML. Throws on a duplicate name or a bad address. */
export function renderEndpointsFile(endpoints: readonly WorkerEndpoint[]): string {
  const seen = new Set<string>();
  const entries = endpoints.map((e) => {
    if (!NAME.test(e.name)) throw new TopologyError(`endpoint name ${JSON.stringify(e.name)}: expected a DNS-1123 label`);
    if (seen.has(e.name)) throw new TopologyError(`endpoint name ${e.name} appears twice`);
    seen.add(e.name);
    if (!WORKER_ROLES.includes(e.role)) throw new TopologyError(`endpoint ${e.name}: role must be one of ${WORKER_ROLES.join(', ')}`);
    if (!isIPv4(e.address))
      throw new TopologyError(`endpoint ${e.name}: address must be an IPv4 literal, got ${JSON.stringify(e.address)}`);
    checkPort(`endpoint ${e.name}`, e.port);
    const labels: Record<string, string> = {};
    for (const [k, v] of Object.entries(e.labels ?? {})) {
      if (!LABEL_KEY.test(k) || !LABEL_VALUE.test(v))
        throw new TopologyError(`endpoint ${e.name}: bad label ${JSON.stringify(k)}=${JSON.stringify(v)}`);
      if (k === ROLE_LABEL) throw new TopologyError(`endpoint ${e.name}: ${ROLE_LABEL} comes from role, not labels`);
      labels[k] = v;
    }
    labels[ROLE_LABEL] = e.role;
    // The EPP wants the port as a string.
    return { name: e.name, address: e.address, port: String(e.port), labels };
  });
  return `# Endpoints for the EPP's file discovery, one per worker; the role is the ${ROLE_LABEL} label.\n${yaml.dump({ endpoints: entries }, { lineWidth: 120 })}`;
}

/** The EPP's `EndpointPickerConfig`, YAML (the upstream e2e's `eppConfig` plus file discovery). */
export function renderEppConfig(opts: EppConfigOptions): string {
  const prefix = opts.prefixCache ?? true;
  const plugins: Array<Record<string, unknown>> = [
    { type: 'openai-parser' },
    { type: 'vllmhttp-parser' },
    { type: 'encode-filter' },
    { type: 'prefill-filter' },
    // decode-filter keeps unlabeled endpoints too; one pool holds every role, so select by label.
    {
      type: 'label-selector-filter',
      name: 'decode-filter',
      parameters: {
        matchExpressions: [{ key: ROLE_LABEL, operator: 'In', values: ['decode', 'prefill-decode', 'both', 'encode-prefill-decode'] }],
      },
    },
    { type: 'queue-scorer' },
    // blockSizeTokens below 64 is raised to 64 by the EPP (with a warning); say so up front.
    ...(prefix ? [{ type: 'approx-prefix-cache-producer', parameters: { blockSizeTokens: 64 } }, { type: 'prefix-cache-scorer' }] : []),
    { type: 'max-score-picker' },
    // Runs the one profile the epp-profile header names (missing: decode; unknown: 429).
    { type: 'header-profile-handler', parameters: { headerName: 'epp-profile', defaultProfile: 'decode' } },
    {
      type: 'file-discovery',
      parameters: { path: checkFilePath('endpointsPath', opts.endpointsPath), watchFile: opts.watchFile ?? false },
    },
  ];
  const doc = {
    apiVersion: 'llm-d.ai/v1alpha1',
    kind: 'EndpointPickerConfig',
    plugins,
    requestHandler: { parsers: [{ pluginRef: 'openai-parser' }, { pluginRef: 'vllmhttp-parser' }] },
    schedulingProfiles: [
      { name: 'encode', plugins: [{ pluginRef: 'encode-filter' }, { pluginRef: 'max-score-picker' }] },
      {
        name: 'prefill',
        plugins: [{ pluginRef: 'prefill-filter' }, { pluginRef: 'queue-scorer', weight: 1 }, { pluginRef: 'max-score-picker' }],
      },
      {
        name: 'decode',
        plugins: [
          { pluginRef: 'decode-filter' },
          { pluginRef: 'queue-scorer', weight: 1 },
          ...(prefix ? [{ pluginRef: 'prefix-cache-scorer', weight: 2 }] : []),
          { pluginRef: 'max-score-picker' },
        ],
      },
    ],
    dataLayer: { discovery: { pluginRef: 'file-discovery' } },
  };
  return `# EPP config: file discovery, header-profile-handler (epp-profile: encode | prefill | decode).\n${yaml.dump(doc, { lineWidth: 120 })}`;
}
