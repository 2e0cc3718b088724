/**
 * Whether a prefill leg's answer says "there is no prefill endpoint at all" (the EPP's scheduler
 * found no pod for the prefill profile), as opposed to "the prefill pods are busy". Only the first
 * may fall back to aggregated decode: falling back on saturation would push the prefill pool's
 * overload onto the decode pool exactly when the system is overloaded.
 *
 * The rule, from what the llm-d EPP answers (reference real-peers.md §0 and the EPP's error code):
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
import type { SideCallResponse } from '../gateway/client';

export const HEADER_REQUEST_DROPPED_REASON = 'x-llm-d-request-dropped-reason';

const NO_ENDPOINT_ANSWERS: ReadonlyArray<{ status: number; reason: string; body: string }> = [
  { status: 429, reason: 'rejected-saturated', body: 'no endpoints available for the given request' },
  { status: 503, reason: 'rejected-no-endpoints', body: 'no endpoints available' },
];

export function isNoPrefillEndpointAnswer(res: Pick<SideCallResponse, 'status' | 'headers' | 'body'>): boolean {
  const reason = res.headers[HEADER_REQUEST_DROPPED_REASON]?.trim().toLowerCase();
  if (reason === undefined) return false;
  for (const a of NO_ENDPOINT_ANSWERS) {
    if (res.status === a.status && reason === a.reason && res.body.includes(a.body)) return true;
  }
  return false;
}
