import type { KvConnector } from './connector';
import { decodeFromPrefillResponse, KV_NIXL } from './connector';

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
