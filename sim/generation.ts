/**
 * What a request "generates": the output tokens, the finish reason, the prompt size and the
 * transfer parameters, independent of the wire shape of the endpoint that asked.
 */

import { BOS_TOKEN_ID, splitWords, stubImageHash, tokenIdOf, tokenizeText } from './dummy-tokenizer';
import { HttpError } from './errors';
import { renderChat } from './render';
import { hashesOf, imageUrlsOf, isObject, JsonObject, kvParamsOf, lastUserText, positiveInt, tokenIdsOf } from './request-fields';
import { ecTransferParams, prefillResponseKvParams } from './transfer-params';
import type { SimMode, SimRole } from './types';

export type Endpoint = 'chat' | 'completions' | 'generate';

/** Output is bounded whatever `max_tokens` or the prompt say. */
export const MAX_OUTPUT_TOKENS = 16384;
const DEFAULT_MODEL = 'sim-model';
const MAX_ID_CHARS = 256;

export interface GenerationSettings {
  readonly role: SimRole;
  readonly mode: SimMode;
}

export interface Generation {
  readonly model: string;
  readonly stream: boolean;
  readonly includeUsage: boolean;
  /** Text pieces (chat, completions) whose concatenation is the reply. */
  readonly words: readonly string[];
  /** Token ids (generate). */
  readonly tokenIds: readonly number[];
  readonly finishReason: string;
  readonly promptTokens: number;
  /** Present on a prefill leg (`do_remote_decode: true`). */
  readonly kvTransferParams: JsonObject | undefined;
  /** Present for the encode role when the request carries images. */
  readonly ecTransferParams: JsonObject | undefined;
  /** For generate answers: the request's `request_id`, else the HTTP request id. */
  readonly requestId: string;
}

const VOCABULARY = [
  'the',
  'model',
  'simulated',
  'answer',
  'is',
  'here',
  'and',
  'it',
  'has',
  'tokens',
  'for',
  'testing',
  'a',
  'quick',
  'brown',
  'fox',
  'jumps',
  'over',
  'lazy',
  'dog',
  'today',
  'with',
  'care',
  'again',
];

function randomInt(min: number, maxExclusive: number): number {
  return min + Math.floor(Math.random() * (maxExclusive - min));
}

function randomWords(count: number): string[] {
  const words: string[] = [];
  for (let i = 0; i < count; i++) words.push(VOCABULARY[randomInt(0, VOCABULARY.length)] + (i + 1 < count ? ' ' : '.'));
  return words;
}

function maxTokensOf(endpoint: Endpoint, body: JsonObject): number | undefined {
  if (endpoint === 'generate') {
    const sampling = body.sampling_params as JsonObject;
    return positiveInt(sampling.max_tokens, 'sampling_params.max_tokens');
  }
  const completionCap = endpoint === 'chat' ? positiveInt(body.max_completion_tokens, 'max_completion_tokens') : undefined;
  return completionCap ?? positiveInt(body.max_tokens, 'max_tokens');
}

/**
 * The echo of the first prompt of a completions request, as pieces (one per output token): a text's
 * words, or token ids as llm-d-inference-sim replays them, `"<id>,"` per id but the last (joined:
 * `"1,2,3"`).
 */
function completionEchoPieces(prompt: unknown): string[] {
  if (typeof prompt === 'string') return splitWords(prompt);
  if (Array.isArray(prompt) && prompt.length > 0) {
    if (typeof prompt[0] === 'string') return splitWords(prompt[0]);
    const ids = tokenIdsOf(prompt) ?? tokenIdsOf(prompt[0]);
    if (ids) return ids.map((id, i) => (i < ids.length - 1 ? `${id},` : String(id)));
  }
  throw new HttpError(400, 'prompt must be a string, a list of strings, or token ids');
}

function completionPromptTokens(prompt: unknown): number {
  if (typeof prompt === 'string') return 1 + tokenizeText(prompt).length;
  if (!Array.isArray(prompt)) return 0;
  if (typeof prompt[0] === 'string') return 1 + tokenizeText(prompt[0]).length;
  return (tokenIdsOf(prompt) ?? tokenIdsOf(prompt[0]) ?? []).length;
}

function encodeHashes(endpoint: Endpoint, body: JsonObject): string[] {
  if (endpoint === 'chat') {
    // The coordinator sends the rendered hashes in `tokens.features`; without them, compute the
    // same stub hashes a render instance would have produced.
    const features = isObject(body.tokens) ? body.tokens.features : undefined;
    const given = hashesOf(isObject(features) ? features.mm_hashes : undefined);
    return given.length > 0 ? given : imageUrlsOf(body).map((url, i) => stubImageHash(i, url));
  }
  return hashesOf(isObject(body.features) ? body.features.mm_hashes : undefined);
}

function cap<T>(items: readonly T[], maxTokens: number | undefined): { items: T[]; truncated: boolean } {
  const limit = Math.min(maxTokens ?? MAX_OUTPUT_TOKENS, MAX_OUTPUT_TOKENS);
  return { items: items.slice(0, limit), truncated: items.length > limit };
}

function safeId(value: unknown, fallback: string): string {
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_ID_CHARS ? value : fallback;
}

export function generate(endpoint: Endpoint, body: JsonObject, httpRequestId: string, settings: GenerationSettings): Generation {
  let promptIds: number[] | undefined;
  if (endpoint === 'generate') {
    promptIds = tokenIdsOf(body.token_ids);
    if (!promptIds) throw new HttpError(400, 'Missing input token_ids');
    if (!isObject(body.sampling_params)) throw new HttpError(400, 'Missing sampling_params field');
  }
  const stream = body.stream === true;
  const kv = kvParamsOf(body, endpoint === 'generate');
  const prefill = kv?.do_remote_decode === true;
  if (prefill && stream) throw new HttpError(400, 'Prefill does not support streaming');
  const maxTokens = maxTokensOf(endpoint, body);
  // Validated in every mode, so a bad prompt is a 400 whether or not it is echoed.
  const promptEcho = endpoint === 'completions' ? completionEchoPieces(body.prompt) : [];
  /** How many tokens to make up in random mode: max_tokens when given, never above the cap. */
  const randomCount = Math.min(maxTokens ?? randomInt(5, 21), MAX_OUTPUT_TOKENS);

  const promptTokens =
    endpoint === 'chat'
      ? renderChat(body).token_ids.length
      : endpoint === 'completions'
        ? completionPromptTokens(body.prompt)
        : (promptIds as number[]).length;

  let words: string[] = [];
  let tokenIds: number[];
  let finishReason = 'stop';
  if (settings.role === 'encode') {
    // --mm-encoder-only answers '!' x max_tokens (default 1) with finish_reason "length".
    const count = Math.min(maxTokens ?? 1, MAX_OUTPUT_TOKENS);
    words = new Array<string>(count).fill('!');
    tokenIds = new Array<number>(count).fill(tokenIdOf('!'));
    finishReason = 'length';
  } else if (endpoint === 'generate') {
    const source = settings.mode === 'echo' ? (promptIds as number[]) : Array.from({ length: randomCount }, () => randomInt(100, 50000));
    const capped = cap(source, maxTokens);
    tokenIds = capped.items;
    if (capped.truncated) finishReason = 'length';
  } else {
    const pieces =
      settings.mode === 'random' ? randomWords(randomCount) : endpoint === 'chat' ? splitWords(lastUserText(body)) : promptEcho;
    const capped = cap(pieces, maxTokens);
    words = capped.items;
    tokenIds = words.map((w) => tokenizeText(w)[0] ?? BOS_TOKEN_ID);
    if (capped.truncated || (settings.mode === 'random' && maxTokens !== undefined && words.length >= maxTokens)) {
      finishReason = 'length';
    }
  }
  if (prefill) finishReason = 'remote_decode';

  const hashes = settings.role === 'encode' ? encodeHashes(endpoint, body) : [];
  return {
    model: safeId(body.model, DEFAULT_MODEL),
    stream,
    includeUsage: isObject(body.stream_options) && body.stream_options.include_usage === true,
    words,
    tokenIds,
    finishReason,
    promptTokens,
    kvTransferParams: prefill ? prefillResponseKvParams(kv as JsonObject) : undefined,
    ecTransferParams: hashes.length > 0 ? ecTransferParams(hashes) : undefined,
    requestId: safeId(body.request_id, httpRequestId),
  };
}
