/**
 * The headers a forward decision can set on the request Envoy finally sends, besides the body's
 * own framing. The Envoy layer budgets room for them under the listener's header-count limit
 * (src/extproc/header-budget.ts), so a step that stamps a new header must be listed here.
 */

/** By fixed name: */
export const FORWARD_STAMPED_HEADERS: readonly string[] = [
  // the decode and prefill-decode forward (Envoy's strip-routing-headers removes a client's epp-profile)
  'epp-profile',
  'x-request-id',
  'content-type',
  // the step span (observability/tracing.ts)
  'traceparent',
  // kv-nixl with dp_size > 1 (connectors/kv/nixl.ts, stamped by prefill)
  'x-data-parallel-rank',
];

/**
 * Relayed from phase answers (src/pipeline/response-headers.ts): `x-peer-topology`, plus at most
 * this many `pipeline.forward_response_headers` names (a bound on the list, checked at start-up).
 */
export const MAX_FORWARD_RESPONSE_HEADERS = 4;

/**
 * Headers never known to be present: the async-broker's objective and fairness headers
 * (`objective_header`, `fairness_header`, configurable names), and the relayed ones above.
 */
export const FORWARD_CONFIGURABLE_HEADERS = 2 + 1 + MAX_FORWARD_RESPONSE_HEADERS;
