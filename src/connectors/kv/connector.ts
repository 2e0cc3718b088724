import type { RequestContext } from '../../pipeline/context';

export const KV_SHARED_STORAGE = 'kv-shared-storage';
export const KV_NIXL = 'kv-nixl';
export const KV_SGLANG = 'kv-sglang';
export type KvConnectorName = typeof KV_SHARED_STORAGE | typeof KV_NIXL | typeof KV_SGLANG;
export const KV_CONNECTOR_NAMES: readonly KvConnectorName[] = [KV_NIXL, KV_SHARED_STORAGE, KV_SGLANG];

/**
 * The KV-cache transfer protocol between prefill and decode workers: the `kv_transfer_params`
 * each leg carries. Each call returns a fresh object the caller may put on a body.
 */
export interface KvConnector {
  readonly name: KvConnectorName;
  /** Params for the prefill leg. */
  preparePrefill(ctx: RequestContext): Record<string, unknown>;
  /** Params for the decode request, usually derived from the prefill response (`ctx.kvTransferParams`). */
  prepareDecode(ctx: RequestContext): Record<string, unknown>;
  /**
   * Extra headers for the prefill leg (kv-nixl with `dp_size` > 1: `x-data-parallel-rank`).
   * Absent or empty for connectors that route by body only.
   */
  prefillHeaders?(ctx: RequestContext): Record<string, string>;
  /** Extra headers for the decode request, read after prefill stored its answer. */
  decodeHeaders?(ctx: RequestContext): Record<string, string>;
}

/**
 * Decode params for the connectors whose prefill worker answers with what decode needs: a shallow
 * copy of the prefill response's params with the direction flags flipped. Without a (usable)
 * prefill answer only the flags remain.
 */
export function decodeFromPrefillResponse(ctx: RequestContext): Record<string, unknown> {
  return { ...(ctx.kvTransferParams ?? {}), do_remote_decode: false, do_remote_prefill: true };
}
