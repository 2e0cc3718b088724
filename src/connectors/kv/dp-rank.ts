import { createHash } from 'node:crypto';

/** The header a data-parallel vLLM deployment reads to pick the engine rank (upstream PR #2480). */
export const HEADER_DATA_PARALLEL_RANK = 'x-data-parallel-rank';

/**
 * The rank a request id hashes to: the first 8 bytes of BLAKE2s-256(requestId), read as a
 * big-endian uint64, modulo `dpSize`. Prefill and decode compute the same value, so both legs of a
 * request land on the same rank without any shared state.
 */
export function hashDataParallelRank(requestId: string, dpSize: number): number {
  const digest = createHash('blake2s256').update(requestId, 'utf8').digest();
  return Number(digest.readBigUInt64BE(0) % BigInt(dpSize));
}

/**
 * The decode leg's rank: the prefill worker's `remote_dp_rank` when it is an integer in
 * [0, dpSize) (the KV blocks live on that rank), else the request-id hash.
 */
export function decodeDataParallelRank(prefillAnswer: Record<string, unknown> | null, requestId: string, dpSize: number): number {
  const reported = prefillAnswer?.['remote_dp_rank'];
  if (typeof reported === 'number' && Number.isInteger(reported) && reported >= 0 && reported < dpSize) return reported;
  return hashDataParallelRank(requestId, dpSize);
}
