/**
 * The production topology without Kubernetes (docs/deploy-without-kubernetes.md): the three files a
 * launcher writes on a router node so that Envoy and the llm-d EPP (file discovery) serve the
 * encode / prefill / decode workers of a job, with epd-coordinator in front of the EPP.
 *
 * - the endpoints file: one entry per worker, its role in the `llm-d.ai/role` label;
 * - the EPP config: file discovery (`watchFile: false` by default), `header-profile-handler`, one
 *   scheduling profile per role, and the prefix-cache producer + scorer on decode (what makes a
 *   conditional decode a hit);
 * - the Envoy config: the public listener runs our ext_proc filter first and the EPP's second, in
 *   one filter chain, to an ORIGINAL_DST cluster (one Envoy hop for decode); side calls re-enter a
 *   gateway listener that has the EPP's filter alone; an admin listener for readiness; no request
 *   timeout; the path policy of envoy/ on the public port (launch/path-policy.ts: `/metrics` and
 *   every other path outside the allow-list is Envoy's 404); an access log with `upstream=` and
 *   `prefiller=` beside our dynamic metadata.
 *
 * Pure functions plus a CLI; an external launcher can call {@link writeTopology} or copy the output
 * of `npx tsx launch/epp-topology.ts --out DIR ...`. {@link readinessGate} is the job's readiness
 * check: Envoy admin `/ready` answers 200 and the EPP's `llm_d_epp_ready_endpoints` gauge counts
 * every endpoint.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { isIPv4 } from 'node:net';
import { join, resolve } from 'node:path';
import yaml from 'js-yaml';
import { REFUSED_PATH_BODY, REFUSED_PATH_STATUS } from '../src/pipeline/path-policy';
import { allowedMatches, processorMatches } from './path-policy';

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

export interface EnvoyConfigOptions {
  /** Where clients connect. */
  readonly publicAddress: string;
  readonly publicPort: number;
  /** The internal listener epd-coordinator's side calls re-enter (`gateway.address`). Loopback. */
  readonly gatewayPort: number;
  /** Envoy admin (readiness: `/ready`). Loopback. */
  readonly adminPort: number;
  /** epd-coordinator's gRPC listener, `ip:port`. */
  readonly coordinatorAddress: string;
  /** The EPP's ext_proc gRPC listener (`--grpc-port`), `ip:port`. */
  readonly eppAddress: string;
  /** Access-log file for both listeners (`/dev/stdout` for a launcher that collects stdout). */
  readonly accessLogPath: string;
  /**
   * The async processor's own entry (llm-d-async's `igw_base_url`), on loopback: the public
   * listener's chain for the pipeline's paths only, with the gRPC metadata `x-epd-origin:
   * async-processor` on our ext_proc streams, so that the fairness id and objective the processor
   * stamps are trusted there (docs/hardening.md). Unset: no such listener.
   */
  readonly asyncPort?: number;
}

export class TopologyError extends Error {
  override readonly name = 'TopologyError';
}

const NAME = /^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/;
const LABEL_KEY = /^([a-z0-9.-]{1,253}\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;

function checkPort(what: string, port: number): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new TopologyError(`${what}: expected a port 1-65535, got ${String(port)}`);
  return port;
}

function hostPort(what: string, value: string): { host: string; port: number } {
  const m = /^([0-9.]+):(\d{1,5})$/.exec(value);
  if (!m || !isIPv4(m[1]!)) throw new TopologyError(`${what}: expected "ipv4:port", got ${JSON.stringify(value)}`);
  return { host: m[1]!, port: checkPort(what, Number(m[2])) };
}

function checkFilePath(what: string, path: string): string {
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

/**
 * The access-log line, `key=value` separated by spaces (values never hold a space: Envoy writes `-`
 * for a missing one). `upstream=` is the endpoint Envoy connected to (the EPP's pick); `prefiller=`
 * the prefill worker named on the request (llm-d's `x-prefiller-host-port`, else the prefill pod
 * epd-coordinator pinned with `x-llm-d-pin-host-port`). The public listener adds our metadata.
 */
export function accessLogFormat(listener: 'public' | 'gateway' | 'async'): string {
  const base = [
    `[envoy] listener=${listener} start=%START_TIME% method=%REQ(:METHOD)% path=%REQ(:PATH)% code=%RESPONSE_CODE%`,
    'flags=%RESPONSE_FLAGS% details=%RESPONSE_CODE_DETAILS% cluster=%UPSTREAM_CLUSTER% upstream=%UPSTREAM_HOST%',
    'prefiller=%REQ(X-PREFILLER-HOST-PORT?X-LLM-D-PIN-HOST-PORT)% epp-profile=%REQ(EPP-PROFILE)% id=%REQ(X-REQUEST-ID)% dur=%DURATION%',
  ];
  if (listener !== 'gateway') {
    base.push(
      ['request_id', 'path_taken', 'steps', 'total_ms', 'status', 'error_step', 'error_class', 'upstream_status']
        .map((k) => `${k}=%DYNAMIC_METADATA(epd.coordinator:${k})%`)
        .join(' '),
    );
  }
  return `${base.join(' ')}\n`;
}

/** One access-log line parsed back into its fields (`-` stays `-`). Lines of other loggers: null. */
export function parseAccessLogLine(line: string): Record<string, string> | null {
  if (!line.startsWith('[envoy] ')) return null;
  const out: Record<string, string> = {};
  for (const tok of line.slice(8).trim().split(/\s+/)) {
    const eq = tok.indexOf('=');
    if (eq > 0) out[tok.slice(0, eq)] = tok.slice(eq + 1);
  }
  return out;
}

const EPP_FILTER = 'epp.ext_proc';
const COORDINATOR_FILTER = 'epd-coordinator';
const ORIGINAL_DST = 'original_destination_cluster';
const ROUTING_HEADER = 'x-gateway-destination-endpoint';

function fileAccessLog(path: string, listener: 'public' | 'gateway' | 'async'): unknown[] {
  return [
    {
      name: 'envoy.access_loggers.file',
      typed_config: {
        '@type': 'type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog',
        path,
        log_format: { text_format_source: { inline_string: accessLogFormat(listener) } },
      },
    },
  ];
}

/** The EPP's filter as the upstream e2e configures it. */
function eppFilter(): unknown {
  return {
    name: EPP_FILTER,
    typed_config: {
      '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
      grpc_service: { envoy_grpc: { cluster_name: 'epp' } },
      failure_mode_allow: false,
      processing_mode: {
        request_header_mode: 'SEND',
        response_header_mode: 'SEND',
        request_body_mode: 'FULL_DUPLEX_STREAMED',
        response_body_mode: 'FULL_DUPLEX_STREAMED',
        request_trailer_mode: 'SEND',
        response_trailer_mode: 'SEND',
      },
      message_timeout: '1000s',
    },
  };
}

function router(): unknown {
  return {
    name: 'envoy.filters.http.router',
    typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router', suppress_envoy_headers: true },
  };
}

const DISABLED = { '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute', disabled: true };

function hcm(statPrefix: string, body: Record<string, unknown>): unknown {
  return {
    name: 'envoy.filters.network.http_connection_manager',
    typed_config: {
      '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
      stat_prefix: statPrefix,
      codec_type: 'AUTO',
      preserve_external_request_id: true,
      // No request timeout: a decode stream runs as long as the model writes.
      stream_idle_timeout: '600s',
      request_timeout: '0s',
      ...body,
    },
  };
}

function staticCluster(name: string, address: { host: string; port: number }, extra: Record<string, unknown>): unknown {
  return {
    name,
    type: 'STATIC',
    connect_timeout: '1s',
    load_assignment: {
      cluster_name: name,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: address.host, port_value: address.port } } } }] }],
    },
    ...extra,
  };
}

const H2 = (extra: Record<string, unknown> = {}) => ({
  'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
    '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
    ...extra,
    explicit_http_config: { http2_protocol_options: { initial_stream_window_size: 16777216, initial_connection_window_size: 67108864 } },
  },
});

/** The Envoy bootstrap, YAML. */
export function renderEnvoyConfig(o: EnvoyConfigOptions): string {
  if (!isIPv4(o.publicAddress)) throw new TopologyError(`publicAddress: expected an IPv4 literal, got ${JSON.stringify(o.publicAddress)}`);
  const coordinator = hostPort('coordinatorAddress', o.coordinatorAddress);
  const epp = hostPort('eppAddress', o.eppAddress);
  const logPath = checkFilePath('accessLogPath', o.accessLogPath);
  const flush = { access_log_flush_interval: '1s' };
  /**
   * A client-facing entry: `public`, or the async processor's `async` (only the pipeline's paths, and
   * our ext_proc streams carry the processor's origin as gRPC metadata, which no request can set).
   */
  const entryListener = (name: 'public' | 'async', address: string, port: number) => ({
    name,
    address: { socket_address: { address, port_value: port } },
    per_connection_buffer_limit_bytes: 1048576,
    filter_chains: [
      {
        filters: [
          hcm(name, {
            use_remote_address: true,
            normalize_path: true,
            merge_slashes: true,
            path_with_escaped_slashes_action: 'UNESCAPE_AND_REDIRECT',
            common_http_protocol_options: { headers_with_underscores_action: 'REJECT_REQUEST', max_headers_count: 85 },
            access_log: fileAccessLog(logPath, name),
            access_log_options: flush,
            http_filters: [
              {
                // A client never names a role, a pod or an EPP preference: only the coordinator does.
                name: 'strip-routing-headers',
                typed_config: {
                  '@type': 'type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation',
                  mutations: {
                    request_mutations: ['epp-profile', ROUTING_HEADER, 'x-llm-d-pin-host-port', 'x-prefiller-host-port', 'prefer'].map(
                      (h) => ({ remove: h }),
                    ),
                  },
                },
              },
              {
                name: COORDINATOR_FILTER,
                typed_config: {
                  '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
                  grpc_service: {
                    envoy_grpc: { cluster_name: 'epd_coordinator' },
                    ...(name === 'async' ? { initial_metadata: [{ key: 'x-epd-origin', value: 'async-processor' }] } : {}),
                  },
                  failure_mode_allow: false,
                  processing_mode: {
                    request_header_mode: 'SEND',
                    request_body_mode: 'FULL_DUPLEX_STREAMED',
                    request_trailer_mode: 'SEND',
                    response_header_mode: 'SKIP',
                    response_body_mode: 'NONE',
                    response_trailer_mode: 'SKIP',
                  },
                  message_timeout: '600s',
                  metadata_options: { receiving_namespaces: { untyped: ['epd.coordinator'] } },
                },
              },
              // Second: the EPP sees the final decode request (epp-profile: decode, our body) and picks the pod.
              eppFilter(),
              router(),
            ],
            route_config: {
              name,
              virtual_hosts: [
                {
                  name,
                  domains: ['*'],
                  // The path policy of envoy/ (launch/path-policy.ts, docs/hardening.md): the
                  // allowed paths go on; anything else (a worker's /metrics, /sleep, /admin/*,
                  // */render, ...) is Envoy's own 404, before either ext_proc filter.
                  routes: [
                    ...(name === 'async' ? processorMatches() : allowedMatches()).map((match) => ({
                      match,
                      route: { cluster: ORIGINAL_DST, timeout: '0s' },
                    })),
                    {
                      match: { prefix: '/' },
                      direct_response: { status: REFUSED_PATH_STATUS, body: { inline_string: REFUSED_PATH_BODY } },
                      response_headers_to_add: [
                        { header: { key: 'content-type', value: 'application/json' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' },
                      ],
                      typed_per_filter_config: { [COORDINATOR_FILTER]: DISABLED, [EPP_FILTER]: DISABLED },
                    },
                  ],
                },
              ],
            },
          }),
        ],
      },
    ],
  });
  const publicListener = entryListener('public', o.publicAddress, checkPort('publicPort', o.publicPort));
  const asyncListener = o.asyncPort === undefined ? [] : [entryListener('async', '127.0.0.1', checkPort('asyncPort', o.asyncPort))];
  const gatewayListener = {
    name: 'gateway',
    address: { socket_address: { address: '127.0.0.1', port_value: checkPort('gatewayPort', o.gatewayPort) } },
    filter_chains: [
      {
        filters: [
          hcm('gateway', {
            access_log: fileAccessLog(logPath, 'gateway'),
            access_log_options: flush,
            http_filters: [eppFilter(), router()],
            route_config: {
              name: 'gateway',
              virtual_hosts: [
                {
                  name: 'gateway',
                  domains: ['*'],
                  routes: [
                    {
                      match: { prefix: '/', headers: [{ name: 'epp-profile', present_match: true }] },
                      route: { cluster: ORIGINAL_DST, timeout: '0s' },
                    },
                    {
                      match: { prefix: '/' },
                      direct_response: {
                        status: 400,
                        body: { inline_string: 'missing epp-profile header (expected encode, prefill or decode)\n' },
                      },
                      typed_per_filter_config: { [EPP_FILTER]: DISABLED },
                    },
                  ],
                },
              ],
            },
          }),
        ],
      },
    ],
  };
  const doc = {
    admin: { address: { socket_address: { address: '127.0.0.1', port_value: checkPort('adminPort', o.adminPort) } } },
    static_resources: {
      listeners: [publicListener, gatewayListener, ...asyncListener],
      clusters: [
        staticCluster('epd_coordinator', coordinator, {
          per_connection_buffer_limit_bytes: 83886080,
          circuit_breakers: { thresholds: [{ max_connections: 40000, max_pending_requests: 40000, max_requests: 40000 }] },
          // Envoy resets every ext_proc stream when done; see envoy/envoy.template.yaml.
          typed_extension_protocol_options: H2({ common_http_protocol_options: { max_requests_per_connection: 500 } }),
        }),
        staticCluster('epp', epp, {
          circuit_breakers: { thresholds: [{ max_connections: 40000, max_pending_requests: 40000, max_requests: 40000 }] },
          typed_extension_protocol_options: H2(),
        }),
        {
          // The EPP names the pod in x-gateway-destination-endpoint; workers speak HTTP/1.1.
          name: ORIGINAL_DST,
          type: 'ORIGINAL_DST',
          connect_timeout: '5s',
          lb_policy: 'CLUSTER_PROVIDED',
          circuit_breakers: { thresholds: [{ max_connections: 40000, max_pending_requests: 40000, max_requests: 40000 }] },
          original_dst_lb_config: { use_http_header: true, http_header_name: ROUTING_HEADER },
        },
      ],
    },
  };
  return `# Envoy for epd-coordinator + the llm-d EPP (file discovery), written by launch/epp-topology.ts.
# public ${o.publicAddress}:${o.publicPort}: strip client routing headers -> epd-coordinator -> EPP -> ORIGINAL_DST
# gateway 127.0.0.1:${o.gatewayPort}: the coordinator's side calls -> EPP -> ORIGINAL_DST
${o.asyncPort === undefined ? '' : `# async 127.0.0.1:${o.asyncPort}: the async processor's entry (x-epd-origin: async-processor) -> epd-coordinator -> EPP -> ORIGINAL_DST\n`}# admin 127.0.0.1:${o.adminPort}: /ready
${yaml.dump(doc, { lineWidth: 200, noRefs: true })}`;
}

export interface TopologyFiles {
  readonly endpointsPath: string;
  readonly eppConfigPath: string;
  readonly envoyConfigPath: string;
}

export interface TopologyOptions {
  readonly endpoints: readonly WorkerEndpoint[];
  readonly envoy: Omit<EnvoyConfigOptions, 'accessLogPath'> & { readonly accessLogPath?: string };
  readonly watchFile?: boolean;
  readonly prefixCache?: boolean;
}

/** Writes `endpoints.yaml`, `epp.yaml` and `envoy.yaml` into `dir`. */
export function writeTopology(dir: string, opts: TopologyOptions): TopologyFiles {
  const abs = resolve(dir);
  mkdirSync(abs, { recursive: true });
  const files = {
    endpointsPath: join(abs, 'endpoints.yaml'),
    eppConfigPath: join(abs, 'epp.yaml'),
    envoyConfigPath: join(abs, 'envoy.yaml'),
  };
  writeFileSync(files.endpointsPath, renderEndpointsFile(opts.endpoints));
  writeFileSync(
    files.eppConfigPath,
    renderEppConfig({ endpointsPath: files.endpointsPath, watchFile: opts.watchFile, prefixCache: opts.prefixCache }),
  );
  writeFileSync(files.envoyConfigPath, renderEnvoyConfig({ accessLogPath: join(abs, 'access.log'), ...opts.envoy }));
  return files;
}

function get(url: string, timeoutMs: number): Promise<{ status: number; body: string }> {
  return new Promise((res, rej) => {
    const req = request(url, { method: 'GET', timeout: timeoutMs }, (r) => {
      let body = '';
      r.setEncoding('utf8');
      r.on('data', (c: string) => {
        if (body.length < 4 * 1024 * 1024) body += c;
      });
      r.on('end', () => res({ status: r.statusCode ?? 0, body }));
      r.on('error', rej);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', rej);
    req.end();
  });
}

/** The sum of `llm_d_epp_ready_endpoints` over its label sets, or undefined when absent. */
export function readyEndpointsGauge(metricsText: string): number | undefined {
  let total: number | undefined;
  for (const line of metricsText.split('\n')) {
    const m = /^llm_d_epp_ready_endpoints(?:\{[^}]*\})?\s+([0-9.eE+-]+)/.exec(line);
    if (m) total = (total ?? 0) + Number(m[1]);
  }
  return total;
}

export interface ReadinessState {
  readonly ready: boolean;
  readonly envoyReady: boolean;
  /** The EPP's gauge (undefined until it is published). */
  readonly readyEndpoints: number | undefined;
  readonly expectedEndpoints: number;
}

/**
 * The job's readiness gate: Envoy admin `/ready` is 200 and the EPP's `llm_d_epp_ready_endpoints`
 * (endpoints whose metrics it scraped recently) counts every endpoint in the file.
 */
export async function readinessGate(opts: {
  adminUrl: string;
  eppMetricsUrl: string;
  expectedEndpoints: number;
  timeoutMs?: number;
}): Promise<ReadinessState> {
  const t = opts.timeoutMs ?? 2000;
  const envoyReady = await get(`${opts.adminUrl}/ready`, t).then(
    (r) => r.status === 200,
    () => false,
  );
  const readyEndpoints = await get(opts.eppMetricsUrl, t).then(
    (r) => (r.status === 200 ? readyEndpointsGauge(r.body) : undefined),
    () => undefined,
  );
  return {
    ready: envoyReady && readyEndpoints === opts.expectedEndpoints,
    envoyReady,
    readyEndpoints,
    expectedEndpoints: opts.expectedEndpoints,
  };
}

const USAGE = `usage: npx tsx launch/epp-topology.ts --out DIR [options]
  --encode NAME=IP:PORT     an encode worker (repeat for more)
  --prefill NAME=IP:PORT    a prefill worker (repeat)
  --decode NAME=IP:PORT     a decode worker (repeat)
  --public IP:PORT          client listener (0.0.0.0:8080)
  --gateway-port N          side-call listener on 127.0.0.1 (8081)
  --admin-port N            Envoy admin on 127.0.0.1 (19000)
  --async-port N            the async processor's entry on 127.0.0.1 (default: none)
  --coordinator IP:PORT     epd-coordinator gRPC (127.0.0.1:50051)
  --epp IP:PORT             EPP ext_proc gRPC (127.0.0.1:9002)
  --access-log PATH         (DIR/access.log)
  --watch-file              EPP re-reads the endpoints file on change (default: off)
  --no-prefix-cache         no prefix-cache producer/scorer on decode (conditional decode always misses)
Writes DIR/endpoints.yaml, DIR/epp.yaml, DIR/envoy.yaml.`;

export function parseCliArgs(argv: readonly string[]): { dir: string; opts: TopologyOptions } {
  let dir: string | undefined;
  const endpoints: WorkerEndpoint[] = [];
  let pub = { host: '0.0.0.0', port: 8080 };
  const envoy = { gatewayPort: 8081, adminPort: 19000, coordinatorAddress: '127.0.0.1:50051', eppAddress: '127.0.0.1:9002' };
  let accessLogPath: string | undefined;
  let asyncPort: number | undefined;
  let watchFile = false;
  let prefixCache = true;
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new TopologyError(`${flag} needs a value`);
      return v;
    };
    switch (flag) {
      case '--out':
        dir = value();
        break;
      case '--encode':
      case '--prefill':
      case '--decode': {
        const v = value();
        const eq = v.indexOf('=');
        if (eq <= 0) throw new TopologyError(`${flag}: expected NAME=IP:PORT, got ${JSON.stringify(v)}`);
        const hp = hostPort(flag, v.slice(eq + 1));
        endpoints.push({ name: v.slice(0, eq), role: flag.slice(2) as WorkerRole, address: hp.host, port: hp.port });
        break;
      }
      case '--public':
        pub = hostPort(flag, value());
        break;
      case '--gateway-port':
        envoy.gatewayPort = Number(value());
        break;
      case '--admin-port':
        envoy.adminPort = Number(value());
        break;
      case '--async-port':
        asyncPort = Number(value());
        break;
      case '--coordinator':
        envoy.coordinatorAddress = value();
        break;
      case '--epp':
        envoy.eppAddress = value();
        break;
      case '--access-log':
        accessLogPath = value();
        break;
      case '--watch-file':
        watchFile = true;
        break;
      case '--no-prefix-cache':
        prefixCache = false;
        break;
      default:
        throw new TopologyError(`unknown argument ${flag}\n${USAGE}`);
    }
  }
  if (!dir) throw new TopologyError(`--out is required\n${USAGE}`);
  if (endpoints.length === 0) throw new TopologyError(`name at least one worker (--encode/--prefill/--decode)\n${USAGE}`);
  return {
    dir,
    opts: {
      endpoints,
      watchFile,
      prefixCache,
      envoy: {
        ...envoy,
        publicAddress: pub.host,
        publicPort: pub.port,
        ...(accessLogPath ? { accessLogPath } : {}),
        ...(asyncPort !== undefined ? { asyncPort } : {}),
      },
    },
  };
}

if (require.main === module) {
  const argv = process.argv.slice(2);
  if (argv.includes('-h') || argv.includes('--help')) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  try {
    const { dir, opts } = parseCliArgs(argv);
    const files = writeTopology(dir, opts);
    process.stdout.write(`wrote ${files.endpointsPath}\nwrote ${files.eppConfigPath}\nwrote ${files.envoyConfigPath}\n`);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(2);
  }
}
