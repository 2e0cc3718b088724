/**
 * The public listener's path policy (issue #12), in one place: an allow-list. The Envoy bootstrap
 * (envoy/envoy.template.yaml, rendered by launch/envoy-bootstrap.ts) is generated from it, a test
 * checks that config/k8s/routes.yaml lists the same paths, and docs/hardening.md explains it.
 *
 * Why an allow-list: a worker serves many paths that are not inference APIs (vLLM's `/sleep`,
 * `/collective_rpc`, `/v1/load_lora_adapter`, the simulator's `/admin/*`, every `*\/render`, ...),
 * and each release adds some. A deny-list has to know them all; an allow-list only has to know the
 * APIs we mean to serve, and a path nobody thought of gets a 404 instead of reaching a worker.
 *
 * Matching is on Envoy's normalised path (normalize_path, merge_slashes, escaped slashes unescaped
 * and redirected), exact and case-sensitive, query string ignored: `//v1/chat/completions` and
 * `/v1/./chat/completions` run the pipeline; `/v1/chat/completions/`, `/v1/chat/completions/..;/x`
 * or `/V1/chat/completions` are refused.
 */

/** The pipeline's inference paths (src/pipeline/inference-request.ts INFERENCE_PATHS; a test keeps them equal). */
export const PIPELINE_PATHS: readonly string[] = ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/inference/v1/generate'];

/** Answered by the service itself: the async broker's result lookups (`GET /v1/requests/{id}`). */
export const SERVICE_PREFIXES: readonly string[] = ['/v1/requests/'];

/**
 * The other OpenAI-compatible APIs a vLLM worker serves: passed to decode as they came, as
 * upstream's passthrough does (the service sets `EPP-Profile: decode`).
 */
export const DECODE_PATHS: readonly string[] = [
  '/v1/models',
  '/v1/embeddings',
  '/v1/messages',
  '/v1/messages/count_tokens',
  '/v1/audio/transcriptions',
  '/v1/audio/translations',
  '/v1/rerank',
  '/v1/score',
  '/tokenize',
  '/detokenize',
];
/**
 * Sub-resources of those APIs: `/v1/models/{model}`. Not `/v1/responses/{id}`: a stored response
 * lives on one worker, which a pool cannot address, and the prefix would let
 * `/v1/responses/render` (a pipeline side call) reach a worker.
 */
export const DECODE_PREFIXES: readonly string[] = ['/v1/models/'];

/**
 * Worker control and introspection paths known to be refused (every path not allowed above is):
 * the path-policy test sends each one through the real Envoy.
 */
export const KNOWN_CONTROL_PATHS: readonly string[] = [
  '/metrics',
  '/health',
  '/sleep',
  '/wake_up',
  '/is_sleeping',
  '/collective_rpc',
  '/reset_prefix_cache',
  '/start_profile',
  '/stop_profile',
  '/v1/load_lora_adapter',
  '/v1/unload_lora_adapter',
  '/server_info',
  '/admin/config',
  '/admin/faults',
  '/v1/chat/completions/render',
  '/v1/completions/render',
  '/inference/v1/generate/render',
  '/v1/responses/render',
  '/render',
];

/** The client's answer for a refused path (the OpenAI error shape the service uses). */
export const REFUSED_PATH_STATUS = 404;
export const REFUSED_PATH_BODY = JSON.stringify({
  error: { message: 'not found: this path is not served here', type: 'invalid_request_error', param: null, code: REFUSED_PATH_STATUS },
});

/** Every allowed path as an Envoy route match (`path` exact, `prefix` for sub-resources). */
export function allowedMatches(): Array<{ path: string } | { prefix: string }> {
  return [
    ...PIPELINE_PATHS.map((path) => ({ path })),
    ...SERVICE_PREFIXES.map((prefix) => ({ prefix })),
    ...DECODE_PATHS.map((path) => ({ path })),
    ...DECODE_PREFIXES.map((prefix) => ({ prefix })),
  ];
}

/**
 * The async processor's entry (envoy/ `async` listener): it dispatches inference requests only, so
 * only the pipeline's paths are allowed there.
 */
export function processorMatches(): Array<{ path: string }> {
  return PIPELINE_PATHS.map((path) => ({ path }));
}

/** The public virtual host's routes (or another allow-list's), as YAML lines indented for envoy.template.yaml. */
export function renderPublicRoutes(
  indent: string,
  bodyBufferLimit: string,
  matches: ReadonlyArray<{ path: string } | { prefix: string }> = allowedMatches(),
): string {
  const lines: string[] = [];
  for (const m of matches) {
    const [kind, value] = 'path' in m ? ['path', m.path] : ['prefix', m.prefix];
    lines.push(
      `- match: { ${kind}: ${JSON.stringify(value)} }`,
      '  route: { cluster: decode_workers, timeout: 0s }',
      `  request_body_buffer_limit: ${bodyBufferLimit}`,
    );
  }
  lines.push(
    '# Everything else: refused by Envoy itself, before the coordinator or any worker sees it.',
    '- match: { prefix: "/" }',
    '  direct_response:',
    `    status: ${REFUSED_PATH_STATUS}`,
    `    body: { inline_string: ${JSON.stringify(REFUSED_PATH_BODY)} }`,
    '  response_headers_to_add:',
    '  - header: { key: content-type, value: application/json }',
    '    append_action: OVERWRITE_IF_EXISTS_OR_ADD',
    '  typed_per_filter_config:',
    '    epd-coordinator:',
    '      "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute',
    '      disabled: true',
  );
  return lines.map((l) => indent + l).join('\n');
}
