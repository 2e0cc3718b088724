/**
 * Two of the APIs the coordinator passes to decode as they came (launch/path-policy.ts
 * DECODE_PATHS), answered in llm-d-inference-sim's shapes:
 * - `POST /tokenize` `{prompt}` or `{messages}` -> `{"max_model_len","count","tokens":[...],"token_strs":null}`;
 * - `POST /v1/embeddings` `{input: string | string[] | ids | ids[], dimensions?, encoding_format?}` ->
 *   `{"object":"list","data":[{"object":"embedding","index","embedding"}],"model","usage":{"prompt_tokens","total_tokens"}}`,
 *   with the real sim's stub vectors (a function of the token ids) as floats or base64 float32.
 */

import { BOS_TOKEN_ID, tokenizeText } from './dummy-tokenizer';
import { HttpError } from './errors';
import { renderChat } from './render';
import { JsonObject, tokenIdsOf } from './request-fields';

export const TOKENIZE_PATH = '/tokenize';
export const EMBEDDINGS_PATH = '/v1/embeddings';
/** The `--max-model-len` the real-peer topology gives llm-d-inference-sim. */
export const MAX_MODEL_LEN = 131072;
/** llm-d-inference-sim's `default-embedding-dimensions`. */
const DEFAULT_EMBEDDING_DIMENSIONS = 384;
/** Bounds the answer whatever the request asks for. */
const MAX_EMBEDDING_DIMENSIONS = 65536;
const MAX_EMBEDDING_INPUTS = 2048;
const DEFAULT_MODEL = 'sim-model';

const textIds = (text: string): number[] => [BOS_TOKEN_ID, ...tokenizeText(text)];

export function tokenizeReply(body: JsonObject): JsonObject {
  const hasPrompt = typeof body.prompt === 'string' && body.prompt !== '';
  if (hasPrompt && body.messages !== undefined && body.messages !== null) {
    throw new HttpError(400, 'both prompt and messages fields in tokenize request');
  }
  if (body.prompt !== undefined && typeof body.prompt !== 'string') {
    throw new HttpError(400, 'Failed to read and parse tokenize request body, prompt must be a string');
  }
  const tokens = hasPrompt ? textIds(body.prompt as string) : renderChat({ messages: body.messages ?? [] }).token_ids;
  return { max_model_len: MAX_MODEL_LEN, count: tokens.length, tokens, token_strs: null };
}

/** The real sim's `BuildStubEmbedding`: deterministic in the token ids. */
function stubEmbedding(tokens: readonly number[], dim: number): number[] {
  const out = new Array<number>(dim);
  for (let i = 0; i < dim; i++) {
    let v = 0;
    if (i < tokens.length) v = (2 * (tokens[i]! % 1024)) / 1024 - 1;
    else if (tokens.length > 0) v = (2 * (tokens[i % tokens.length]! % 256)) / 256 - 1;
    out[i] = Math.fround(v);
  }
  return out;
}

function base64Floats(values: readonly number[]): string {
  const b = Buffer.alloc(4 * values.length);
  values.forEach((v, i) => b.writeFloatLE(v, 4 * i));
  return b.toString('base64');
}

/** The inputs as token id lists (texts tokenized), or a 400 in the real sim's words. */
function inputTokens(input: unknown): number[][] {
  if (typeof input === 'string') {
    if (input === '') throw new HttpError(400, 'input is required and must be a non-empty string or array');
    return [textIds(input)];
  }
  if (!Array.isArray(input) || input.length === 0) {
    throw new HttpError(400, 'input is required and must be a non-empty string or array');
  }
  if (input.length > MAX_EMBEDDING_INPUTS) throw new HttpError(400, `at most ${MAX_EMBEDDING_INPUTS} inputs`);
  const ids = tokenIdsOf(input);
  if (ids) return [ids];
  return input.map((item) => {
    if (typeof item === 'string') {
      if (item === '') throw new HttpError(400, 'input cannot be an empty string');
      return textIds(item);
    }
    const list = tokenIdsOf(item);
    if (!list) throw new HttpError(400, 'Failed to read and parse request body, input must be a string, strings, or token ids');
    return list;
  });
}

export function embeddingsReply(body: JsonObject): JsonObject {
  const inputs = inputTokens(body.input);
  let dim = DEFAULT_EMBEDDING_DIMENSIONS;
  if (body.dimensions !== undefined && body.dimensions !== null) {
    if (typeof body.dimensions !== 'number' || !Number.isInteger(body.dimensions) || body.dimensions < 1) {
      throw new HttpError(400, 'dimensions must be at least 1');
    }
    dim = Math.min(body.dimensions, MAX_EMBEDDING_DIMENSIONS);
  }
  const asBase64 = body.encoding_format === 'base64';
  let total = 0;
  const data = inputs.map((tokens, index) => {
    total += tokens.length;
    const vector = stubEmbedding(tokens, dim);
    return { object: 'embedding', index, embedding: asBase64 ? base64Floats(vector) : vector };
  });
  const model = typeof body.model === 'string' && body.model !== '' ? body.model : DEFAULT_MODEL;
  return { object: 'list', data, model, usage: { prompt_tokens: total, total_tokens: total } };
}
