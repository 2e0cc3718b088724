/**
 * Whether a prefill leg's answer says "there is no prefill endpoint at all", as opposed to "the
 * prefill pods are busy" (the rule: gateway/no-endpoint.ts). Only the first may fall back to
 * aggregated decode: falling back on saturation would push the prefill pool's overload onto the
 * decode pool exactly when the system is overloaded.
 */
import type { SideCallResponse } from '../gateway/client';
import { noEndpointReason } from '../gateway/no-endpoint';

export function isNoPrefillEndpointAnswer(res: Pick<SideCallResponse, 'status' | 'header' | 'body'>): boolean {
  return noEndpointReason(res) !== undefined;
}
