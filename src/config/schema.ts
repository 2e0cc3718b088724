/**
 * The one description of every scalar configuration key: its type, default and meaning. The loader,
 * the environment overrides and the generated configuration reference all read this table.
 */

/** `list`: a YAML list of strings, or (from the environment) one comma-separated string. */
export type KeyType = 'int' | 'bool' | 'string' | 'duration' | 'enum' | 'list';

export interface KeySpec {
  readonly key: string;
  readonly type: KeyType;
  /** Defaults are given in the YAML form (durations as strings). `undefined` = no default. */
  readonly default: number | boolean | string | undefined;
  readonly doc: string;
  readonly values?: readonly string[];
  readonly min?: number;
  /** Accepted for compatibility with the upstream HTTP server's config; has no effect here. */
  readonly inert?: boolean;
}

export const KEYS: readonly KeySpec[] = [
  { key: 'log_level', type: 'int', default: 2, min: 0, doc: 'Verbosity: 1 warn, 2 info, 3 verbose, 4 debug, 5 trace (trace logs redacted bodies).' },
  { key: 'tracing', type: 'bool', default: false, doc: 'OpenTelemetry spans (request, pipeline, one per step and side call), exported over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://localhost:4318`); sampler from `OTEL_TRACES_SAMPLER` (default parent-based, ratio 0.1). The client\'s W3C `traceparent` reaches every side call either way.' },
  { key: 'server.listen_addr', type: 'string', default: '0.0.0.0:50051', doc: 'gRPC ext_proc listener, `host:port` (`:port` = all interfaces).' },
  { key: 'server.max_request_body_size', type: 'int', default: 64, min: 0, doc: 'Largest request body in MiB; above it the client gets 413. 0 means 64.' },
  { key: 'server.body_mode', type: 'enum', default: 'auto', values: ['auto', 'full_duplex', 'buffered'], doc: 'Body mode assumed when Envoy does not announce one (protocol_config, sent by Envoy >= 1.34, always wins). `auto` assumes full_duplex.' },
  { key: 'server.metadata_namespace', type: 'string', default: 'epd.coordinator', doc: 'Dynamic metadata namespace written on every request; list it in the filter\'s metadata_options.receiving_namespaces.' },
  { key: 'server.shutdown_timeout', type: 'duration', default: '25s', doc: 'Drain on SIGTERM: health turns NOT_SERVING and new streams are refused at once; in-flight streams may finish for this long, then the process exits 0. A second SIGTERM exits at once.' },
  { key: 'server.streamed_responses', type: 'bool', default: true, doc: 'Relay a conditional-decode hit to the client as it streams (a streamed immediate response; needs Envoy >= 1.37 in full-duplex mode). `false` collects the hit into one response, for Envoy 1.34-1.36, which answer a streamed response with 500.' },
  { key: 'server.stream_idle_timeout', type: 'duration', default: '600s', doc: 'An ext_proc stream on which Envoy still owes the request (headers or body) but sends nothing for this long is ended (gRPC DEADLINE_EXCEEDED; Envoy, if still listening, answers its 500) and its work aborted: it releases streams whose reset never reached the service. Time spent in our own pipeline or relaying a response does not count. In buffered mode the wait covers the client\'s whole upload. Match Envoy\'s `stream_idle_timeout`. `0` = off; otherwise 100ms to 24h.' },
  { key: 'server.max_request_headers', type: 'int', default: 85, min: 0, doc: 'Must equal the public listener\'s `common_http_protocol_options.max_headers_count` (Envoy\'s request header-count limit, 85 in envoy/; Envoy\'s default is 100). Envoy checks our header mutation of a request against it again, counting pseudo-headers and the headers it added itself, and answers a bare 500 when we push it over; so an inference request with no room left for the headers we may set gets our 431 JSON at once, before any side call. Lower than Envoy\'s is safe (some early 431s); higher reopens the 500. `0` = no check; at most 65535.' },
  { key: 'server.stream_reset_burst', type: 'int', default: 100000, min: 1, doc: 'RST_STREAM frames one HTTP/2 session of the gRPC listener may receive at once before it is closed (nghttp2\'s rapid-reset guard; Node\'s default 1000). Envoy resets every ext_proc stream when its filter is done with it, so with Node\'s defaults a busy session died after 1,000-2,000 requests and failed every request on it. The listener is for Envoy only; at most 4294967295.' },
  { key: 'server.stream_reset_rate', type: 'int', default: 10000, min: 1, doc: 'RST_STREAM frames per second that refill `server.stream_reset_burst` (Node\'s default 33). Keep it above the request rate one Envoy connection can carry (one reset per request). At most 4294967295.' },
  { key: 'server.metrics_addr', type: 'string', default: ':9464', doc: 'Prometheus `/metrics` listener, `host:port` (`:port` = all interfaces). `""` or `off` disables it.' },
  { key: 'server.metrics_port', type: 'int', default: undefined, doc: 'Upstream\'s key for the `/metrics` port (PR #2435; upstream default 9090). When set, it replaces the port of `server.metrics_addr` (keeping that key\'s host, else all interfaces); `<= 0` disables metrics. Unset: `server.metrics_addr` alone decides.' },
  { key: 'server.tls_cert_file', type: 'string', default: undefined, doc: 'PEM certificate chain of the gRPC listener. Set together with `server.tls_key_file` to serve TLS; unset = plaintext h2c. Reloaded when the file changes, like `server.cert_path`.' },
  { key: 'server.tls_key_file', type: 'string', default: undefined, doc: 'PEM private key matching `server.tls_cert_file`.' },
  { key: 'server.tls_client_ca_file', type: 'string', default: undefined, doc: 'PEM CA bundle for client certificates. When set, the listener requires and verifies a client certificate (mTLS). Needs `server.tls_cert_file`.' },
  { key: 'server.secure_serving', type: 'bool', default: undefined, doc: 'Serve the gRPC listener over TLS (upstream key and env `COORDINATOR_SERVER_SECURE_SERVING`). Unset: TLS when a certificate is configured (`server.cert_path` or `server.tls_cert_file`), plaintext h2c otherwise, so the plaintext Envoy cluster in envoy/ keeps working; upstream defaults to `true`. `true` without a certificate serves a self-signed one (subject `O=llm-d`, no SANs: clients must skip verification). `false` serves plaintext and ignores the certificate keys, with a warning.' },
  { key: 'server.secure_coordinator', type: 'bool', default: undefined, doc: 'Upstream\'s earlier name of `server.secure_serving` (PR #2805), accepted as an alias; `secure_serving` wins when both are set.' },
  { key: 'server.cert_path', type: 'string', default: undefined, doc: 'Directory holding `tls.crt` and `tls.key` (upstream\'s key; a Kubernetes TLS Secret mounted as a volume). Loaded at start-up and reloaded when the files change, without restart: new connections get the new certificate, open streams keep theirs. Not together with `server.tls_cert_file`.' },
  { key: 'server.tls_min_version', type: 'string', default: '', doc: 'Lowest TLS version: `VersionTLS10` … `VersionTLS13` (Go names, as upstream). Empty = TLS 1.2.' },
  { key: 'server.tls_cipher_suites', type: 'list', default: '', doc: 'TLS 1.2 cipher suites by their Go names (a YAML list, or comma-separated), e.g. `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`; TLS 1.3 suites are accepted and ignored, as in Go. Empty = Node\'s defaults. An unknown name stops start-up.' },
  { key: 'server.trusted_client_headers', type: 'list', default: '', doc: 'Gateway headers a client may set (default none). Every header the gateway, the EPP or a worker acts on (routing, tenancy/scheduling, transfer; the list is in docs/hardening.md) is removed from a client request before any side call and from the request Envoy forwards, unless listed here; e.g. `[x-llm-d-slo-ttft-ms, x-llm-d-slo-tpot-ms]` to let clients state their SLOs. `epp-profile` and `x-gateway-destination-endpoint(-subset)` cannot be listed. A header value the service would pass on that is not visible ASCII gets a 400 naming the header.' },
  { key: 'server.trusted_origin_headers', type: 'list', default: 'x-llm-d-inference-fairness-id,x-llm-d-inference-objective,x-gateway-inference-objective', doc: 'Gateway headers trusted on requests through the async processor\'s own entry (envoy/: the loopback `async` listener, whose ext_proc filter adds the gRPC metadata `x-epd-origin: async-processor`, which a client cannot set; docs/hardening.md). Default: the fairness id and objective the processor stamps on its dispatches. Requests through the public listener never get these. Same rules as `server.trusted_client_headers`; `[]` trusts nothing there either.' },
  { key: 'server.read_timeout', type: 'duration', default: '30s', inert: true, doc: 'Upstream HTTP listener setting; accepted, no effect (Envoy owns client connections).' },
  { key: 'server.write_timeout', type: 'duration', default: '120s', inert: true, doc: 'Upstream HTTP listener setting; accepted, no effect (Envoy owns client connections).' },
  { key: 'gateway.address', type: 'string', default: undefined, doc: 'Base URL of the Inference Gateway listener that side calls re-enter (e.g. `http://127.0.0.1:8081`). Required when a gateway-facing step is configured.' },
  { key: 'gateway.timeout', type: 'duration', default: '60s', doc: 'Response-header timeout of every gateway side call.' },
  { key: 'gateway.max_idle_conns_per_host', type: 'int', default: 100, min: 0, doc: 'Idle keep-alive connections kept to the gateway.' },
  { key: 'gateway.idle_conn_timeout', type: 'duration', default: '90s', doc: 'How long an idle gateway connection is kept.' },
  { key: 'pipeline.kv_connector', type: 'string', default: undefined, doc: 'KV connector injected into every step: kv-shared-storage (default), kv-nixl, kv-sglang.' },
  { key: 'pipeline.ec_connector', type: 'string', default: undefined, doc: 'EC connector injected into every step: ec-shared-storage (default), ec-nixl.' },
  { key: 'pipeline.dp_size', type: 'int', default: 1, min: 0, doc: 'Data-parallel engine ranks behind each prefill and decode pool, handed to every step as `dp_size` unless the step sets its own (0 hands nothing). Only kv-nixl uses it: above 1, prefill and decode get `x-data-parallel-rank`.' },
  { key: 'pipeline.use_openai_format', type: 'bool', default: true, doc: 'false sends the tokens-in `/inference/v1/generate` format to encode and prefill; requires a render step.' },
  // Bounds on the request fields that make a worker allocate (issue 19; src/pipeline/request-limits.ts). Each is checked before any side call.
  { key: 'pipeline.request_limits.n', type: 'int', default: 128, min: 1, doc: 'Largest `n` (choices per request). OpenAI refuses more than 128; vLLM has no cap of its own, and llm-d-inference-sim sizes per-request buffers by `n` (a huge `n` killed it).' },
  { key: 'pipeline.request_limits.best_of', type: 'int', default: 128, min: 1, doc: 'Largest `best_of` (legacy completions). vLLM needs `best_of >= n`, so it gets the same bound as `n`.' },
  { key: 'pipeline.request_limits.max_tokens', type: 'int', default: 16777216, min: 0, doc: 'Largest `max_tokens` (2^24). Above the largest context window a model is served with today (10M tokens), so the worker\'s own context-length check, a clear 400, stays what bounds a real request; nothing near an integer type\'s edge reaches a worker.' },
  { key: 'pipeline.request_limits.max_completion_tokens', type: 'int', default: 16777216, min: 0, doc: 'Largest `max_completion_tokens` (chat\'s newer name of `max_tokens`); as `max_tokens`.' },
  { key: 'pipeline.request_limits.max_output_tokens', type: 'int', default: 16777216, min: 0, doc: 'Largest `max_output_tokens` (the Responses API\'s `max_tokens`); as `max_tokens`.' },
  { key: 'pipeline.request_limits.min_tokens', type: 'int', default: 16777216, min: 0, doc: 'Largest `min_tokens` (vLLM); as `max_tokens`, which vLLM also requires it not to exceed.' },
  { key: 'pipeline.request_limits.logprobs', type: 'int', default: 20, min: 0, doc: 'Largest integer `logprobs` (completions, and generate\'s `sampling_params`; on chat `logprobs` is a boolean). vLLM refuses more than its `--max-logprobs`, default 20.' },
  { key: 'pipeline.request_limits.top_logprobs', type: 'int', default: 20, min: 0, doc: 'Largest `top_logprobs` (chat, Responses). OpenAI\'s documented maximum and vLLM\'s default `--max-logprobs`, both 20; 2^53 killed llm-d-inference-sim.' },
  { key: 'pipeline.request_limits.prompt_logprobs', type: 'int', default: 20, min: 0, doc: 'Largest `prompt_logprobs` (vLLM), also checked against `--max-logprobs` (default 20) by vLLM. vLLM\'s `-1` (the whole vocabulary) is refused here.' },
  { key: 'pipeline.request_limits.stop_count', type: 'int', default: 64, min: 0, doc: 'Most strings in `stop` (and `stop_sequences` on `/v1/messages`). OpenAI allows 4, vLLM any number; every one is matched against the output at each token, so the count is bounded, well above what clients send.' },
  { key: 'pipeline.request_limits.stop_length', type: 'int', default: 1024, min: 1, doc: 'Longest single stop string, in characters: each is searched for in the text generated so far at every token.' },
  { key: 'pipeline.request_limits.logit_bias_entries', type: 'int', default: 1024, min: 0, doc: 'Most entries in `logit_bias`. vLLM builds a bias tensor from every entry for each sampling step; a bias per vocabulary token is never needed.' },
];
