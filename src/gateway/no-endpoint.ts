/**
 * Whether a side call's answer is the llm-d EPP saying "there is no endpoint for this profile" (its
 * scheduler found no pod), as opposed to "the pods are busy" or a worker's own 429/503. The client
 * reports it to its observer (the `epd_coordinator_side_call_no_endpoint_total` metric), and the
 * prefill step falls back to aggregated decode on it (steps/no-endpoint.ts).
 *
 * The rule, from what the llm-d EPP answers (checked against a real EPP and its error code):
 * - `429` + `x-llm-d-request-dropped-reason: rejected-saturated` + a body containing
 *   `no endpoints available for the given request`: the scheduler profile's filters left no
 *   candidate (e.g. the endpoints list has no pod with the prefill role). v0.10 and later.
 * - `503` + `x-llm-d-request-dropped-reason: rejected-no-endpoints` + a body containing
 *   `no endpoints available`: newer EPPs' flow control with an empty pool (scaled to zero).
 *
 * Saturation of existing pods is a `429 rejected-saturated` too, but its body is flow control's
 * (`queue at capacity`, `request rejected by flow control`, a saturation detector's message) and
 * never the scheduler's "no endpoints available" message, so the body is what tells them apart.
 * All three parts must match; a worker's own 429/503 carries no dropped-reason header.
 */
import type { AnswerHeaders } from '../pipeline/side-call';

export const HEADER_REQUEST_DROPPED_REASON = 'x-llm-d-request-dropped-reason';

/** The dropped-reason values that mean "no endpoint": a bounded metric label. */
export type NoEndpointReason = 'rejected-saturated' | 'rejected-no-endpoints';

const NO_ENDPOINT_ANSWERS: ReadonlyArray<{ status: number; reason: NoEndpointReason; body: string }> = [
  { status: 429, reason: 'rejected-saturated', body: 'no endpoints available for the given request' },
  { status: 503, reason: 'rejected-no-endpoints', body: 'no endpoints available' },
];

/** Whether an answer with this status and these headers may be a no-endpoint answer (its body decides). */
export function mayBeNoEndpointAnswer(res: AnswerHeaders & { readonly status: number }): boolean {
  return (res.status === 429 || res.status === 503) && res.header(HEADER_REQUEST_DROPPED_REASON) !== undefined;
}

/** The EPP's dropped reason when the answer is a no-endpoint answer, else undefined. */
export function noEndpointReason(res: AnswerHeaders & { readonly status: number; readonly body: Buffer }): NoEndpointReason | undefined {
  const reason = res.header(HEADER_REQUEST_DROPPED_REASON)?.trim().toLowerCase();
  if (reason === undefined) return undefined;
  for (const a of NO_ENDPOINT_ANSWERS) {
    if (res.status === a.status && reason === a.reason && res.body.includes(a.body)) return a.reason;
  }
  return undefined;
}
