/** Header names and values the coordinator stamps on its legs (lower-case, as sent). */
export const HEADER_CONTENT_TYPE = 'content-type';
export const HEADER_REQUEST_ID = 'x-request-id';
export const HEADER_EPP_PROFILE = 'epp-profile';
export const CONTENT_TYPE_JSON = 'application/json';

/** `EPP-Profile` values: the worker role the EPP should pick a pod for. */
export type Phase = 'encode' | 'prefill' | 'decode';

/**
 * The header set of a gateway leg (encode, prefill, conditional-decode, decode): the client's
 * forwarded headers with the coordinator's own stamped on top, so a client can never choose them.
 * Writes into `forwarded` (a fresh copy from `ctx.forwardedHeaders()`) and returns it.
 */
export function gatewayLegHeaders(forwarded: Record<string, string>, requestId: string, phase: Phase): Record<string, string> {
  forwarded[HEADER_CONTENT_TYPE] = CONTENT_TYPE_JSON;
  forwarded[HEADER_REQUEST_ID] = requestId;
  forwarded[HEADER_EPP_PROFILE] = phase;
  return forwarded;
}
