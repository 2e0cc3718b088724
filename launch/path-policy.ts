/**
 * The path policy of src/pipeline/path-policy.ts (the one list, which the service enforces itself)
 * as Envoy routes: the bootstrap (envoy/envoy.template.yaml, rendered by launch/envoy-bootstrap.ts)
 * and the EPP topology are generated from it, a test checks that config/k8s/routes.yaml lists the
 * same paths, and docs/hardening.md explains it.
 *
 * Matching is on Envoy's normalised path (normalize_path, merge_slashes, escaped slashes unescaped
 * and redirected), exact and case-sensitive, query string ignored: `//v1/chat/completions` and
 * `/v1/./chat/completions` run the pipeline; `/v1/chat/completions/`, `/v1/chat/completions/..;/x`
 * or `/V1/chat/completions` are refused.
 */
import {
  DECODE_PATHS,
  DECODE_PREFIXES,
  PIPELINE_PATHS,
  REFUSED_PATH_BODY,
  REFUSED_PATH_STATUS,
  SERVICE_PREFIXES,
} from '../src/pipeline/path-policy';

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

/**
 * No path policy at the edge: one route sends every path to the filter and decode, as an Envoy we
 * did not render may (the tests of the service's own allow-list use it).
 */
export function renderCatchAllRoute(indent: string, bodyBufferLimit: string): string {
  return [
    '# No path policy here: every path reaches the coordinator, which refuses what it does not serve.',
    '- match: { prefix: "/" }',
    '  route: { cluster: decode_workers, timeout: 0s }',
    `  request_body_buffer_limit: ${bodyBufferLimit}`,
  ]
    .map((l) => indent + l)
    .join('\n');
}
