/**
 * The Envoy of the budget bench's transport layer: one listener per ext_proc server under test
 * (each its own filter and cluster, configured as envoy/ configures ours: request headers and
 * trailers SEND, the body FULL_DUPLEX_STREAMED, nothing of the response), routed to a direct 200,
 * so that nothing but the ext_proc conversation costs the service anything.
 */
import yaml from 'js-yaml';
import { envoyProcessingMode } from '../../launch/ext-proc-policy';

export interface BudgetListener {
  readonly name: string;
  readonly port: number;
  /** The ext_proc server, 127.0.0.1:`extProcPort`. */
  readonly extProcPort: number;
}

export function budgetEnvoyConfig(o: { adminPort: number; listeners: readonly BudgetListener[]; gracefulClose: boolean }): string {
  const listeners = o.listeners.map((l) => ({
    name: l.name,
    address: { socket_address: { address: '127.0.0.1', port_value: l.port } },
    filter_chains: [
      {
        filters: [
          {
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: {
              '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
              stat_prefix: l.name,
              codec_type: 'AUTO',
              http_filters: [
                {
                  name: 'ext_proc',
                  typed_config: {
                    '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
                    grpc_service: { envoy_grpc: { cluster_name: `ext_proc_${l.name}` } },
                    failure_mode_allow: false,
                    processing_mode: envoyProcessingMode(),
                    message_timeout: '60s',
                  },
                },
                {
                  name: 'envoy.filters.http.router',
                  typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' },
                },
              ],
              route_config: {
                virtual_hosts: [
                  {
                    name: l.name,
                    domains: ['*'],
                    routes: [{ match: { prefix: '/' }, direct_response: { status: 200, body: { inline_string: '{"ok":true}' } } }],
                  },
                ],
              },
            },
          },
        ],
      },
    ],
  }));
  const clusters = o.listeners.map((l) => ({
    name: `ext_proc_${l.name}`,
    type: 'STATIC',
    connect_timeout: '1s',
    circuit_breakers: { thresholds: [{ max_connections: 40000, max_pending_requests: 40000, max_requests: 40000 }] },
    load_assignment: {
      cluster_name: `ext_proc_${l.name}`,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: l.extProcPort } } } }] }],
    },
    typed_extension_protocol_options: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
        '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
        explicit_http_config: {
          http2_protocol_options: { initial_stream_window_size: 16777216, initial_connection_window_size: 67108864 },
        },
      },
    },
  }));
  const doc = {
    admin: { address: { socket_address: { address: '127.0.0.1', port_value: o.adminPort } } },
    ...(o.gracefulClose
      ? {
          layered_runtime: {
            layers: [{ name: 'static', static_layer: { 'envoy.reloadable_features.ext_proc_graceful_grpc_close': true } }],
          },
        }
      : {}),
    static_resources: { listeners, clusters },
  };
  return yaml.dump(doc, { lineWidth: 200, noRefs: true });
}
