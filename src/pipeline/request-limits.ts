/**
 * Bounds on the request fields that make a worker allocate (`pipeline.request_limits`), checked
 * before any side call. One `"n": 9007199254740992` used to reach a worker and kill it (Go's
 * `makeslice: cap out of range`), and every later request then got a 503: such a value is the
 * client's mistake and gets a 400 naming the field and the limit instead.
 *
 * Every number must be a safe integer (JSON numbers beyond 2^53 are not exact, and a float or a
 * numeric string is no count at all) within the limit; `null` counts as absent, as in the workers.
 * The defaults and the reason for each are the `pipeline.request_limits.*` keys of config/schema.ts.
 */
import { KEYS } from '../config/schema';
import { BadRequestError } from './errors';
import type { BodyCodec, JsonObject } from './json-body';

export type LimitName =
  | 'n'
  | 'best_of'
  | 'max_tokens'
  | 'max_completion_tokens'
  | 'max_output_tokens'
  | 'min_tokens'
  | 'logprobs'
  | 'top_logprobs'
  | 'prompt_logprobs'
  | 'stop_count'
  | 'stop_length'
  | 'logit_bias_entries';

export type RequestLimits = Readonly<Record<LimitName, number>>;

export const REQUEST_LIMITS_KEY = 'pipeline.request_limits';

/** The defaults, from the one table of config keys. */
export const DEFAULT_REQUEST_LIMITS: RequestLimits = Object.fromEntries(
  KEYS.filter((k) => k.key.startsWith(`${REQUEST_LIMITS_KEY}.`)).map((k) => [k.key.slice(REQUEST_LIMITS_KEY.length + 1), k.default]),
) as RequestLimits;

/** The configured values over the defaults. */
export function requestLimits(configured: Readonly<Record<string, number>> | undefined): RequestLimits {
  return { ...DEFAULT_REQUEST_LIMITS, ...configured };
}

/** Integer fields: the body's name is the limit's name. */
const INT_FIELDS: ReadonlyArray<{ readonly name: LimitName; readonly min: number }> = [
  { name: 'n', min: 1 },
  { name: 'best_of', min: 1 },
  { name: 'max_tokens', min: 0 },
  { name: 'max_completion_tokens', min: 0 },
  { name: 'max_output_tokens', min: 0 },
  { name: 'min_tokens', min: 0 },
  { name: 'top_logprobs', min: 0 },
  { name: 'prompt_logprobs', min: 0 },
];

/**
 * What `logprobs` is in this API: chat's is a boolean (`top_logprobs` is the count), completions'
 * and generate's a count; elsewhere (Responses, passthrough APIs) either is let through.
 */
export type LogprobsKind = 'boolean' | 'count' | 'either';

/** How a refused value is named: numbers as they parsed, anything else by its JSON type only. */
function shown(v: unknown): string {
  if (typeof v === 'number') return String(v);
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return 'an object';
  return `a ${typeof v}`;
}

function checkCount(v: unknown, field: string, min: number, max: number): void {
  if (v === undefined || v === null) return;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    throw new BadRequestError(`${field} must be an integer from ${min} to ${max}, got ${shown(v)}`);
  }
}

function checkStop(v: unknown, field: string, limits: RequestLimits, codec: BodyCodec): void {
  if (v === undefined || v === null) return;
  const maxLength = limits.stop_length;
  // A long string may still be a placeholder for the client's bytes: measured without decoding more than the limit.
  const tooLong = (s: string): boolean => codec.textHead(s, maxLength + 1).length > maxLength;
  if (typeof v === 'string') {
    if (tooLong(v)) throw new BadRequestError(`${field} must be at most ${maxLength} characters long`);
    return;
  }
  if (!Array.isArray(v)) throw new BadRequestError(`${field} must be a string or an array of strings, got ${shown(v)}`);
  if (v.length > limits.stop_count) {
    throw new BadRequestError(`${field} must hold at most ${limits.stop_count} strings, got ${v.length}`);
  }
  for (let i = 0; i < v.length; i++) {
    const s: unknown = v[i];
    if (typeof s !== 'string') throw new BadRequestError(`${field}[${i}] must be a string, got ${shown(s)}`);
    if (tooLong(s)) throw new BadRequestError(`${field}[${i}] must be at most ${maxLength} characters long`);
  }
}

function checkLogitBias(v: unknown, field: string, max: number): void {
  if (v === undefined || v === null) return;
  if (typeof v !== 'object' || Array.isArray(v)) {
    throw new BadRequestError(`${field} must be an object mapping token ids to biases, got ${shown(v)}`);
  }
  let entries = 0;
  // Counted without listing the keys: a huge map is refused as soon as it passes the limit.
  for (const key in v) {
    if (Object.prototype.hasOwnProperty.call(v, key) && ++entries > max) {
      throw new BadRequestError(`${field} must have at most ${max} entries`);
    }
  }
}

/**
 * Throws a {@link BadRequestError} naming the first field of `body` outside its limit. `prefix`
 * names where `body` sits in the request (`sampling_params.` for generate's sampling fields).
 */
export function checkRequestLimits(body: JsonObject, limits: RequestLimits, codec: BodyCodec, logprobs: LogprobsKind, prefix = ''): void {
  for (const f of INT_FIELDS) checkCount(body[f.name], prefix + f.name, f.min, limits[f.name]);
  const lp = body['logprobs'];
  if (typeof lp === 'boolean') {
    if (logprobs === 'count') checkCount(lp, `${prefix}logprobs`, 0, limits.logprobs);
  } else if (lp !== undefined && lp !== null) {
    if (logprobs === 'boolean') throw new BadRequestError(`${prefix}logprobs must be a boolean, got ${shown(lp)}`);
    checkCount(lp, `${prefix}logprobs`, 0, limits.logprobs);
  }
  checkStop(body['stop'], `${prefix}stop`, limits, codec);
  checkStop(body['stop_sequences'], `${prefix}stop_sequences`, limits, codec);
  checkLogitBias(body['logit_bias'], `${prefix}logit_bias`, limits.logit_bias_entries);
}
