/**
 * Cross-phase response headers (upstream PR #2301, reference §12.10) and the topology header
 * (PRs #2319, #2365): headers a phase's answer carries that later phases' requests must carry too,
 * so an EPP can keep its decisions consistent across phases (a revision, a topology).
 */
import { ConfigError } from '../config/errors';
import { HOP_BY_HOP_HEADERS } from './hop-by-hop';
import { MAX_FORWARD_RESPONSE_HEADERS } from './forward-headers';

/** Upstream's default when `pipeline.forward_response_headers` is absent. */
export const DEFAULT_FORWARD_RESPONSE_HEADERS: readonly string[] = ['x-llm-d-disagg-revision'];

/**
 * The topology of the pod the prefill EPP picked (`host=…,rack=…,zone=…`), written by its
 * `topology-stamp-handler`. Relayed from the prefill answer to the decode request; a client's own
 * is never passed on, and a decode answer's is never shown to the client.
 */
export const HEADER_PEER_TOPOLOGY = 'x-peer-topology';

/** Headers only the coordinator and the EPPs exchange: stripped from every answer a client sees. */
export const INTERNAL_RESPONSE_HEADERS: readonly string[] = [HEADER_PEER_TOPOLOGY, 'epp-profile'];

/** Headers the service owns on every leg, or that describe one hop: never relayed. */
const NOT_FORWARDABLE: ReadonlySet<string> = new Set([
  ...HOP_BY_HOP_HEADERS,
  'host',
  'content-length',
  'content-type',
  'content-encoding',
  'epp-profile',
  'x-request-id',
  'expect',
]);

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;
const KEY = 'pipeline.forward_response_headers';

/**
 * Validates the configured list as upstream: names trimmed and lower-cased; an empty entry, a
 * non-forwardable header or a duplicate stops start-up. `undefined` (key absent) = the default;
 * `[]` disables forwarding.
 */
export function parseForwardResponseHeaders(raw: unknown): string[] {
  if (raw === undefined || raw === null) return [...DEFAULT_FORWARD_RESPONSE_HEADERS];
  if (!Array.isArray(raw)) throw new ConfigError(KEY, 'a list of header names', raw);
  // Each may add a header to the decode request; the header budget reserves room for this many.
  if (raw.length > MAX_FORWARD_RESPONSE_HEADERS)
    throw new ConfigError(KEY, `at most ${MAX_FORWARD_RESPONSE_HEADERS} header names`, raw.length);
  const seen = new Set<string>();
  raw.forEach((v, i) => {
    if (typeof v !== 'string') throw new ConfigError(`${KEY}[${i}]`, 'a header name', v);
    const name = v.trim().toLowerCase();
    if (name === '') throw new ConfigError(`${KEY}[${i}]`, 'a header name (must not be empty)', v);
    if (!TOKEN.test(name) || NOT_FORWARDABLE.has(name) || name.startsWith(':')) {
      throw new ConfigError(KEY, `forwardable header names (contains non-forwardable header "${name}")`, v);
    }
    if (seen.has(name)) throw new ConfigError(KEY, `distinct header names (contains duplicate header "${name}")`, v);
    seen.add(name);
  });
  return [...seen];
}

/** The value most of a fan-out's answers carried (ties: the first in request order). */
export function mostFrequent(values: readonly string[]): string | undefined {
  // A Map iterates in insertion order: the first value seen wins a tie.
  const counts = new Map<string, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  let best: string | undefined;
  let bestCount = 0;
  for (const [v, c] of counts) {
    if (c > bestCount) {
      best = v;
      bestCount = c;
    }
  }
  return best;
}
