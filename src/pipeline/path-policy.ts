/**
 * The path policy (issue #12, issue #19 item 6), in one place: an allow-list. The service refuses
 * every other path itself (handler.ts), and the Envoy files are rendered from the same lists
 * (launch/path-policy.ts into envoy/, the chart's gateways.pathPolicy and config/k8s/routes.yaml,
 * which tests keep equal). docs/hardening.md explains it.
 *
 * Why an allow-list: a worker serves many paths that are not inference APIs (vLLM's `/sleep`,
 * `/collective_rpc`, `/v1/load_lora_adapter`, the simulator's `/admin/*`, every `*\/render`, ...),
 * and each release adds some. A deny-list has to know them all; an allow-list only has to know the
 * APIs we mean to serve, and a path nobody thought of gets a 404 instead of reaching a worker.
 *
 * Why in the service too: behind an Envoy that we did not render (a user's, whose route sends
 * every path to the filter), the Envoy files' list is not there, and the service alone decides.
 */
import { classify, errorBody, PathNotServedError } from './errors';
import { INFERENCE_PATHS } from './inference-request';

/** The pipeline's inference paths. */
export const PIPELINE_PATHS: readonly string[] = [...INFERENCE_PATHS];

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
 * the path-policy tests send each one through the real Envoy.
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

/**
 * The client's answer for a refused path, from the service or from Envoy's own route: the same
 * bytes either way (classified once, errors.ts), so a client cannot tell which layer refused.
 */
export const REFUSED_PATH_STATUS = 404;
export const REFUSED_PATH_BODY = errorBody(classify(new PathNotServedError(), '')).toString();

/** An allow-list: exact paths, and prefixes that each end with `/`. */
export interface PathPolicy {
  readonly exact: ReadonlySet<string>;
  readonly prefixes: readonly string[];
}

export const DEFAULT_PATH_POLICY: PathPolicy = {
  exact: new Set([...PIPELINE_PATHS, ...DECODE_PATHS]),
  prefixes: [...SERVICE_PREFIXES, ...DECODE_PREFIXES],
};

/** The default policy as `server.allowed_paths` writes it (a prefix as `/v1/models/*`). */
export function allowedPathEntries(policy: PathPolicy = DEFAULT_PATH_POLICY): string[] {
  return [...policy.exact, ...policy.prefixes.map((p) => `${p}*`)];
}

/**
 * What a prefix's remainder may be: segments of unreserved characters (RFC 3986) and `:` `@`,
 * none empty, none `.` or `..`. Without Envoy's normalisation the path arrives as the client wrote
 * it, and a worker's own router may still resolve `/v1/models/../../metrics`, `..;/`, `%2e%2e` or
 * `%2F` to a control path; so those are refused here rather than trusted to every worker's router.
 */
const PLAIN_TAIL = /^[A-Za-z0-9._~:@-]+(?:\/[A-Za-z0-9._~:@-]+)*$/;
const DOT_SEGMENT = /(?:^|\/)\.\.?(?:\/|$)/;

/**
 * Does the policy allow this `:path`? Exact and case-sensitive on the path as it came, query string
 * ignored, as Envoy's route matches; a prefix only with a plain remainder. Never looser than the
 * Envoy route on any path: behind our Envoy (normalised paths) the answers are the route's, except
 * that a prefix with an empty or unusual remainder is refused; behind an Envoy that does not
 * normalise, `//v1/chat/completions`, `/v1/./chat/completions` and every percent-encoding are
 * refused, since the path the worker would see is not the one named here.
 */
export function pathAllowed(policy: PathPolicy, path: string): boolean {
  const q = path.indexOf('?');
  const p = q < 0 ? path : path.slice(0, q);
  if (policy.exact.has(p)) return true;
  for (const prefix of policy.prefixes) {
    if (!p.startsWith(prefix)) continue;
    const tail = p.slice(prefix.length);
    if (PLAIN_TAIL.test(tail) && !DOT_SEGMENT.test(tail)) return true;
  }
  return false;
}

export class PathPolicyError extends Error {
  override readonly name = 'PathPolicyError';
  constructor(
    readonly expected: string,
    readonly entry: string,
  ) {
    super(`expected ${expected}, got ${JSON.stringify(entry)}`);
  }
}

/** One entry is a path: `/`, then segments as a prefix's remainder may have them. */
const ENTRY_PATH = /^\/(?:[A-Za-z0-9._~:@-]+\/)*[A-Za-z0-9._~:@-]+$/;

/**
 * `server.allowed_paths` as a policy: each entry an exact path, or a prefix written `/v1/models/*`
 * (it allows `/v1/models/{anything plain}`, not `/v1/models` itself). The list replaces the
 * default one, so that a path can be closed as well as opened. Entries are plain paths: no query,
 * no percent-encoding, no dot or empty segment (none could ever match).
 */
export function pathPolicy(entries: readonly string[]): PathPolicy {
  if (entries.length === 0) throw new PathPolicyError('at least one path (an empty list refuses every request)', '');
  const exact = new Set<string>();
  const prefixes: string[] = [];
  for (const entry of entries) {
    const prefix = entry.endsWith('/*');
    const path = prefix ? entry.slice(0, -2) : entry;
    if (!ENTRY_PATH.test(path) || DOT_SEGMENT.test(path)) {
      throw new PathPolicyError('a path such as /v1/my-api, or a prefix such as /v1/files/* (plain segments only)', entry);
    }
    if (prefix) {
      if (!prefixes.includes(`${path}/`)) prefixes.push(`${path}/`);
    } else exact.add(path);
  }
  return { exact, prefixes };
}
