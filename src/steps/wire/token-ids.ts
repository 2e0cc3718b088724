import { BadRequestError } from '../../pipeline/errors';
import { jsonTypeName } from './json';

/**
 * Go converts an integral float64 to int only below 2^63; larger values saturate, and upstream
 * rejects them as overflow. We keep the same bound.
 */
const INT_LIMIT = 2 ** 63;

/** Why `v` is not a non-negative integer, or `null` when it is one. */
export function nonNegativeIntProblem(v: unknown): string | null {
  if (typeof v !== 'number') return `expected number, got ${jsonTypeName(v)}`;
  if (!Number.isInteger(v) || v < 0 || v >= INT_LIMIT) return `expected non-negative integer, got ${v}`;
  return null;
}

/**
 * Client token ids as numbers. Every element must be a non-negative integer (an integral float
 * such as `5.0` counts); the first that is not fails with `invalid token at index <i>`.
 */
export function toTokenIds(values: readonly unknown[]): number[] {
  for (let i = 0; i < values.length; i++) {
    const problem = nonNegativeIntProblem(values[i]);
    if (problem !== null) throw new BadRequestError(`invalid token at index ${i}: ${problem}`);
  }
  // Checked above: the array already holds exactly the ids we want, so no copy is made.
  return values as number[];
}

/** `body.token_ids` of a generate request: required, a non-empty array of token ids. */
export function extractTokenIds(raw: unknown): number[] {
  if (raw === undefined || raw === null) throw new BadRequestError('token_ids is required');
  if (!Array.isArray(raw)) throw new BadRequestError(`token_ids must be an array, got ${jsonTypeName(raw)}`);
  if (raw.length === 0) throw new BadRequestError('token_ids must not be empty');
  return toTokenIds(raw);
}
