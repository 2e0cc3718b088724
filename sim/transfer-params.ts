/** The transfer-parameter shapes llm-d-inference-sim answers with (all DUMMY placeholders). */

import { JsonObject } from './request-fields';

/** Keys an SGLang-style prefill request carries that its answer echoes for the decode leg. */
const SGLANG_ECHO_KEYS = ['bootstrap_host', 'bootstrap_port', 'bootstrap_room'] as const;

/** `BuildPrefillKVTransferParams` of the real sim, plus the SGLang bootstrap echo. */
export function prefillResponseKvParams(requestKv: JsonObject): JsonObject {
  const params: JsonObject = {
    do_remote_decode: false,
    do_remote_prefill: true,
    remote_block_ids: ['DUMMY_ID'],
    remote_engine_id: 'DUMMY_ID',
    remote_host: 'DUMMY',
    remote_port: 1234,
    tp_size: 1,
  };
  for (const key of SGLANG_ECHO_KEYS) {
    const value = requestKv[key];
    if (typeof value === 'string' || typeof value === 'number') params[key] = value;
  }
  return params;
}

const NIXL_METADATA_B64 = Buffer.from('NIXL_METADATA_PLACEHOLDER').toString('base64');

/** `buildECTransferParams` of the real sim: one DUMMY descriptor per mm hash. */
export function ecTransferParams(hashes: readonly string[]): JsonObject {
  const params: JsonObject = {};
  for (const hash of hashes) {
    params[hash] = {
      peer_host: 'DUMMY',
      peer_port: 1234,
      size_bytes: 2359296,
      nixl_agent_metadata_b64: NIXL_METADATA_B64,
    };
  }
  return params;
}
