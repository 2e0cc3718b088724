import type { KvConnector } from './connector';
import { decodeFromPrefillResponse, KV_NIXL } from './connector';
import { decodeDataParallelRank, hashDataParallelRank, HEADER_DATA_PARALLEL_RANK } from './dp-rank';

/**
 * NIXL: the prefill worker reports where its blocks are; decode receives that verbatim. The prefill
 * leg names the remote fields explicitly as null, as vLLM's NixlConnector expects.
 */
export const nixlKv: KvConnector = {
  name: KV_NIXL,
  preparePrefill: () => ({
    do_remote_decode: true,
    do_remote_prefill: false,
    remote_engine_id: null,
    remote_block_ids: null,
    remote_host: null,
    remote_port: null,
  }),
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
