import type { KvConnector } from './connector';
import { decodeFromPrefillResponse, KV_NIXL } from './connector';
import { decodeDataParallelRank, hashDataParallelRank, HEADER_DATA_PARALLEL_RANK } from './dp-rank';

/** The prefill leg's transfer params: the remote fields named explicitly as null, as vLLM's NixlConnector expects. */
export const NIXL_PREFILL_PARAMS: Readonly<Record<string, unknown>> = Object.freeze({
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
});

/** NIXL: the prefill worker reports where its blocks are; decode receives that verbatim. */
export const nixlKv: KvConnector = {
  name: KV_NIXL,
  // A copy: a leg's body is its own.
  preparePrefill: () => ({ ...NIXL_PREFILL_PARAMS }),
  prepareDecode: decodeFromPrefillResponse,
};

/**
 * NIXL in front of data-parallel engines (`dp_size` > 1, upstream PR #2480): the same bodies, plus
 * an `x-data-parallel-rank` header on both legs so each lands on the engine rank that holds (or
 * will pull) the request's KV blocks. Body params are unchanged.
 */
export function nixlKvWithDataParallel(dpSize: number): KvConnector {
  if (dpSize <= 1) return nixlKv;
  return {
    ...nixlKv,
    prefillHeaders: (ctx) => ({ [HEADER_DATA_PARALLEL_RANK]: String(hashDataParallelRank(ctx.requestId, dpSize)) }),
    decodeHeaders: (ctx) => ({
      [HEADER_DATA_PARALLEL_RANK]: String(decodeDataParallelRank(ctx.kvTransferParams, ctx.requestId, dpSize)),
    }),
  };
}
