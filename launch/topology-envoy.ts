/**
 * The Envoy bootstrap of the no-Kubernetes topology (launch/epp-topology.ts): the public listener runs
 * our ext_proc filter first and the EPP's second, in one filter chain, to an ORIGINAL_DST cluster;
 * side calls re-enter a gateway listener that has the EPP's filter alone; an admin listener for
 * readiness; the path policy of envoy/ on the public port.
 */
import { isIPv4 } from 'node:net';
import yaml from 'js-yaml';
import { checkFilePath, checkPort, hostPort, TopologyError } from './epp-files';
import { REFUSED_PATH_BODY, REFUSED_PATH_STATUS } from '../src/pipeline/path-policy';
import { allowedMatches, processorMatches } from './path-policy';
import { fileAccessLog } from './topology-access-log';
import { envoyProcessingMode } from './ext-proc-policy';
import { MAX_WORKERS } from '../src/config/config';
import {
  gracefulCloseRuntime,
  serviceHealthChecks,
  serviceMaxConcurrentStreams,
  serviceOutlierDetection,
  workerCommonHttpOptions,
  workerRetryPolicy,
} from './envoy-policy';

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
  /**
   * Plain HTTP listeners on loopback that route every request to one service, with no ext_proc
   * filter: how the upstream Go coordinator is deployed (behind Envoy, re-entering the gateway
   * listener for each leg). The compare bench puts it there, so both coordinators have the same
   * front door. Default none.
   */
  readonly proxyListeners?: readonly ProxyListener[];
  /**
   * Envoy's gRPC health check of the coordinator cluster. Default true; false only for a
   * coordinator with no health service (the compare bench's bare Node coordinator).
   */
  readonly coordinatorHealthCheck?: boolean;
  /**
   * epd-coordinator's `server.workers`: above 1 its cluster caps the streams per connection, so that
   * Envoy opens connections for every worker process (launch/envoy-policy.ts). Default 1.
   */
  readonly coordinatorWorkers?: number;
  /**
   * `enable_reuse_port` on every listener (envoy/envoy.template.yaml says why). Default true, Envoy's
   * own; false for a launcher whose ports may race, so that a clash fails to bind.
   */
  readonly reusePort?: boolean;
}

export interface ProxyListener {
  /** Listener, stat prefix and cluster name (`go`). */
  readonly name: string;
  readonly port: number;
  /** The service, `ip:port`, HTTP/1.1. */
  readonly address: string;
}

const EPP_FILTER = 'epp.ext_proc';
const COORDINATOR_FILTER = 'epd-coordinator';
const ORIGINAL_DST = 'original_destination_cluster';
const ROUTING_HEADER = 'x-gateway-destination-endpoint';

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

const H2 = (extra: Record<string, unknown> = {}, http2: Record<string, unknown> = {}) => ({
  'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
    '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
    ...extra,
    explicit_http_config: {
      http2_protocol_options: { initial_stream_window_size: 16777216, initial_connection_window_size: 67108864, ...http2 },
    },
  },
});

/** `max_concurrent_streams` for a multi-process coordinator, else nothing (Envoy's unlimited default). */
function workerStreamCap(workers: number | undefined): Record<string, unknown> {
  if (workers !== undefined && (!Number.isInteger(workers) || workers < 1 || workers > MAX_WORKERS))
    throw new TopologyError(`coordinatorWorkers: expected an integer 1-${MAX_WORKERS}, got ${String(workers)}`);
  const cap = serviceMaxConcurrentStreams(workers);
  return cap === undefined ? {} : { max_concurrent_streams: cap };
}

/** The Envoy bootstrap, YAML. */
export function renderEnvoyConfig(o: EnvoyConfigOptions): string {
  if (!isIPv4(o.publicAddress)) throw new TopologyError(`publicAddress: expected an IPv4 literal, got ${JSON.stringify(o.publicAddress)}`);
  const coordinator = hostPort('coordinatorAddress', o.coordinatorAddress);
  const epp = hostPort('eppAddress', o.eppAddress);
  const logPath = checkFilePath('accessLogPath', o.accessLogPath);
  const flush = { access_log_flush_interval: '1s' };
  const reusePort = o.reusePort ?? true;
  /**
   * A client-facing entry: `public`, or the async processor's `async` (only the pipeline's paths, and
   * our ext_proc streams carry the processor's origin as gRPC metadata, which no request can set).
   */
  const entryListener = (name: 'public' | 'async', address: string, port: number) => ({
    name,
    address: { socket_address: { address, port_value: port } },
    enable_reuse_port: reusePort,
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
                  processing_mode: envoyProcessingMode(),
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
                  // Only what no worker received is retried (launch/envoy-policy.ts).
                  retry_policy: workerRetryPolicy(),
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
    enable_reuse_port: reusePort,
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
                  // Only what no worker received is retried (launch/envoy-policy.ts).
                  retry_policy: workerRetryPolicy(),
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
  const proxies = (o.proxyListeners ?? []).map((p) => ({
    listener: {
      name: p.name,
      address: { socket_address: { address: '127.0.0.1', port_value: checkPort(`proxy ${p.name} port`, p.port) } },
      enable_reuse_port: reusePort,
      filter_chains: [
        {
          filters: [
            hcm(p.name, {
              access_log: fileAccessLog(logPath, 'gateway'),
              access_log_options: flush,
              http_filters: [router()],
              route_config: {
                name: p.name,
                virtual_hosts: [
                  {
                    name: p.name,
                    domains: ['*'],
                    routes: [{ match: { prefix: '/' }, route: { cluster: `proxy_${p.name}`, timeout: '0s' } }],
                  },
                ],
              },
            }),
          ],
        },
      ],
    },
    cluster: staticCluster(`proxy_${p.name}`, hostPort(`proxy ${p.name} address`, p.address), {
      circuit_breakers: { thresholds: [{ max_connections: 40000, max_pending_requests: 40000, max_requests: 40000 }] },
    }),
  }));
  const doc = {
    // Graceful ext_proc close (Envoy >= 1.34): half-close and wait for the service, no reset per request.
    layered_runtime: gracefulCloseRuntime(true),
    admin: { address: { socket_address: { address: '127.0.0.1', port_value: checkPort('adminPort', o.adminPort) } } },
    static_resources: {
      listeners: [publicListener, gatewayListener, ...asyncListener, ...proxies.map((p) => p.listener)],
      clusters: [
        staticCluster('epd_coordinator', coordinator, {
          per_connection_buffer_limit_bytes: 83886080,
          circuit_breakers: { thresholds: [{ max_connections: 40000, max_pending_requests: 40000, max_requests: 40000 }] },
          // Envoy resets every ext_proc stream when done; see envoy/envoy.template.yaml.
          typed_extension_protocol_options: H2(
            { common_http_protocol_options: { max_requests_per_connection: 500 } },
            workerStreamCap(o.coordinatorWorkers),
          ),
          // A draining replica turns NOT_SERVING; Envoy stops opening streams to it (launch/envoy-policy.ts).
          ...(o.coordinatorHealthCheck === false ? {} : { health_checks: serviceHealthChecks() }),
          outlier_detection: serviceOutlierDetection(),
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
          // Closed before the workers' keep-alive would close it under a request (launch/envoy-policy.ts).
          typed_extension_protocol_options: {
            'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
              '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
              common_http_protocol_options: workerCommonHttpOptions(),
              explicit_http_config: { http_protocol_options: {} },
            },
          },
        },
        ...proxies.map((p) => p.cluster),
      ],
    },
  };
  return `# Envoy for epd-coordinator + the llm-d EPP (file discovery), written by launch/epp-topology.ts.
# public ${o.publicAddress}:${o.publicPort}: strip client routing headers -> epd-coordinator -> EPP -> ORIGINAL_DST
# gateway 127.0.0.1:${o.gatewayPort}: the coordinator's side calls -> EPP -> ORIGINAL_DST
${o.asyncPort === undefined ? '' : `# async 127.0.0.1:${o.asyncPort}: the async processor's entry (x-epd-origin: async-processor) -> epd-coordinator -> EPP -> ORIGINAL_DST\n`}# admin 127.0.0.1:${o.adminPort}: /ready
${yaml.dump(doc, { lineWidth: 200, noRefs: true })}`;
}
