/**
 * Room for the coordinator's own headers under Envoy's header-count limit.
 *
 * Envoy checks the request's header map twice against the listener's `max_headers_count`: once
 * when the client's request is parsed, and again after applying our header mutation
 * (ext_proc's header-mutation result check), this time counting the pseudo-headers and the headers
 * Envoy added itself (x-forwarded-for, x-forwarded-proto, x-request-id, ...). A request that passes
 * the first check but not the second ends in Envoy's bare 500
 * (`header_mutation_result_exceeds_limit`), after the whole pipeline and its side calls ran.
 *
 * The request_headers message carries exactly the map Envoy checks the second time, so the check
 * is made on it up front: if its entries plus the most our final forward can add exceed the limit,
 * the request head says so (`RequestHead.headerBudgetExceeded`) and the pipeline answers 431 at
 * once, observed like any other answer.
 */
import type { HeaderBudget } from '../pipeline/decision';
import { FORWARD_CONFIGURABLE_HEADERS, FORWARD_STAMPED_HEADERS } from '../pipeline/forward-headers';
import { MAX_DECODED_HEADERS } from './headers';
import type { HeaderMapIn } from './wire';

/**
 * Every header our final mutation can set, by fixed name: the pipeline's forward headers, and
 * `content-length`, which this layer sets on a BUFFERED body reply (responses.ts; absent when the
 * client sent its body chunked). A name the client already sent is replaced, not added.
 * test/protocol/header-budget.test.ts fails when a new header is stamped without being listed.
 */
export const FORWARD_HEADER_NAMES: readonly string[] = [...FORWARD_STAMPED_HEADERS, 'content-length'];

/** The most headers our final mutation can add to a request that has none of them. */
export const MAX_FORWARD_ADDED_HEADERS = FORWARD_HEADER_NAMES.length + FORWARD_CONFIGURABLE_HEADERS;

/** Envoy's `max_headers_count` in envoy/envoy.template.yaml (Envoy's own default is 100). */
export const DEFAULT_MAX_REQUEST_HEADERS = 85;

export type HeaderCount = HeaderBudget;

/**
 * The request's header count against `limit` (the listener's max_headers_count): `null` when our
 * mutation cannot push it over, else the numbers for the client's 431.
 */
export function exceedsHeaderBudget(map: HeaderMapIn | null | undefined, limit: number): HeaderCount | null {
  if (limit <= 0) return null;
  const entries = map?.headers ?? [];
  const present = new Set<string>();
  // A stray client's huge map needs no full scan: the first entries already decide it.
  const n = Math.min(entries.length, MAX_DECODED_HEADERS);
  for (let i = 0; i < n; i++) {
    const key = entries[i]!.key;
    if (typeof key === 'string') {
      const name = key.toLowerCase();
      if (FORWARD_HEADER_NAMES.includes(name)) present.add(name);
    }
  }
  const room = MAX_FORWARD_ADDED_HEADERS - present.size;
  const allowed = limit - room;
  return entries.length > allowed ? { entries: entries.length, allowed } : null;
}
