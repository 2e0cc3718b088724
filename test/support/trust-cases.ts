/**
 * The hostile inputs of the trust-boundary suites (issue #12), apart from any one stack so that the
 * same cases can be sent through a stack with the real EPP in front (PEERS_BIN) as well as through
 * ours: every gateway header a client might spoof, the value that crashed the real EPP, and the
 * variants of an inference path with the answer docs/hardening.md documents for each.
 */
import { GATEWAY_HEADERS } from '../../src/pipeline/header-policy';

/** Every gateway header the policy knows, with a value a hostile client would send. */
export function spoofedGatewayHeaders(): Record<string, string> {
  const out: Record<string, string> = Object.fromEntries([...GATEWAY_HEADERS.keys()].map((h) => [h, `spoofed-${h.length}`]));
  // `prefer: if-available` would make a conditional-decode pool answer; reserve-endpoint asks the EPP for a pod.
  out['prefer'] = 'reserve-endpoint';
  return out;
}

/** 100 x U+00FF: undici sends it as latin-1 bytes; as a fairness id it crashed the real EPP. */
export const LATIN1_VALUE = '\u00ff'.repeat(100);

/** What a path variant must get: the pipeline runs (a prefill leg, then decode), a refusal, or a redirect. */
export type PathAnswer = 'pipeline' | 404 | 400 | 307;

/** Variants of the inference path, and control paths dressed up as one (sent raw, not normalised by the client). */
export const PATH_VARIANTS: ReadonlyArray<readonly [path: string, answer: PathAnswer]> = [
  ['/v1/chat/completions', 'pipeline'],
  ['/v1/chat/completions?stream=false', 'pipeline'],
  ['//v1/chat/completions', 'pipeline'],
  ['/v1//chat///completions', 'pipeline'],
  ['/v1/./chat/completions', 'pipeline'],
  ['/v1/x/../chat/completions', 'pipeline'],
  ['/v1/chat/completions/', 404],
  ['/v1/chat/completions//', 404],
  ['/v1/chat/completions/.', 404],
  ['/v1/chat/completions%00', 400],
  ['/v1/chat/completions/..;/', 404],
  ['/v1/chat/completions/..;/render', 404],
  ['/v1/chat/completions;x', 404],
  ['/V1/chat/completions', 404],
  ['/v1/chat%2Fcompletions', 307],
  ['/v1/chat%2fcompletions', 307],
  ['/v1/chat/completions/../../metrics', 404],
  ['/v1/chat/completions/%2e%2e/%2e%2e/metrics', 404],
  ['//metrics', 404],
  ['/metrics/', 404],
  ['/admin/../admin/config', 404],
  ['/v1/requests/../../sleep', 404],
];
