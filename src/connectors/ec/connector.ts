import type { RequestContext } from '../../pipeline/context';

export const EC_SHARED_STORAGE = 'ec-shared-storage';
export const EC_NIXL = 'ec-nixl';
export type EcConnectorName = typeof EC_SHARED_STORAGE | typeof EC_NIXL;
export const EC_CONNECTOR_NAMES: readonly EcConnectorName[] = [EC_NIXL, EC_SHARED_STORAGE];

/**
 * The encoder-cache transfer protocol between encode and prefill workers.
 */
export interface EcConnector {
  readonly name: EcConnectorName;
  /**
   * Records one encode answer's `ec_transfer_params` (already coerced: an object or null). Called
   * serially, in entry order, after every encode leg has answered.
   */
  mergeEncodeResponse(ctx: RequestContext, params: Record<string, unknown> | null): void;
  /**
   * The `ec_transfer_params` of the prefill leg: a fresh object each call, empty when there is
   * nothing to send (the field is then omitted). Throws a plain Error (a 502) on conflicting input.
   */
  preparePrefill(ctx: RequestContext): Record<string, unknown>;
}
