/**
 * `/v1/chat/completions/render` and `/v1/completions/render` with the dummy tokenizer, in the
 * response shapes llm-d-inference-sim's render routes return (as upstream's render step reads them):
 * chat `{"token_ids", "features"?}` (features only when there are images), completions
 * `[{"token_ids"}]` per prompt.
 */

import { BOS_TOKEN_ID, IMAGE_PLACEHOLDER_LENGTH, IMAGE_PLACEHOLDER_TOKEN_ID, stubImageHash, tokenizeText } from './dummy-tokenizer';
import { HttpError } from './errors';
import { isObject, JsonObject, messagesOf, partsOf, tokenIdsOf } from './request-fields';

export interface ChatRenderResult {
  token_ids: number[];
  features?: {
    mm_hashes: { image: string[] };
    mm_placeholders: { image: Array<{ offset: number; length: number }> };
    kwargs_data: { image: string[] };
  };
}

export interface CompletionRenderElement {
  token_ids: number[];
}

/**
 * BOS, then per message its role and content in order; each `image_url` part becomes a run of
 * placeholder ids at the offset where it appears, so placeholders line up with token_ids.
 */
export function renderChat(body: JsonObject): ChatRenderResult {
  if (!Array.isArray(body.messages)) throw new HttpError(400, 'messages must be an array');
  const tokenIds: number[] = [BOS_TOKEN_ID];
  const hashes: string[] = [];
  const placeholders: Array<{ offset: number; length: number }> = [];
  for (const message of messagesOf(body)) {
    if (typeof message.role === 'string') tokenIds.push(...tokenizeText(message.role));
    if (typeof message.content === 'string') {
      tokenIds.push(...tokenizeText(message.content));
      continue;
    }
    for (const part of partsOf(message) ?? []) {
      if (part.type === 'text' && typeof part.text === 'string') {
        tokenIds.push(...tokenizeText(part.text));
      } else if (part.type === 'image_url' && isObject(part.image_url)) {
        const url = part.image_url.url;
        if (typeof url !== 'string' || url === '') continue;
        hashes.push(stubImageHash(hashes.length, url));
        placeholders.push({ offset: tokenIds.length, length: IMAGE_PLACEHOLDER_LENGTH });
        for (let i = 0; i < IMAGE_PLACEHOLDER_LENGTH; i++) tokenIds.push(IMAGE_PLACEHOLDER_TOKEN_ID);
      }
    }
  }
  if (hashes.length === 0) return { token_ids: tokenIds };
  const features = {
    mm_hashes: { image: hashes },
    mm_placeholders: { image: placeholders },
    // The real sim's stub kwargs: base64 of the hash (stands in for msgpack'd pixel data).
    kwargs_data: { image: hashes.map((h) => Buffer.from(h).toString('base64')) },
  };
  return { token_ids: tokenIds, features };
}

/** One element per prompt; a single string prompt gives exactly one. */
export function renderCompletions(body: JsonObject): CompletionRenderElement[] {
  const prompt = body.prompt;
  const element = (ids: number[]): CompletionRenderElement => ({ token_ids: ids });
  const fromText = (text: string): number[] => [BOS_TOKEN_ID, ...tokenizeText(text)];
  if (typeof prompt === 'string') return [element(fromText(prompt))];
  if (Array.isArray(prompt) && prompt.length > 0) {
    if (prompt.every((p) => typeof p === 'string')) return prompt.map((p: string) => element(fromText(p)));
    const ids = tokenIdsOf(prompt);
    if (ids) return [element(ids)];
    const batches = prompt.map(tokenIdsOf);
    if (batches.every((b) => b !== undefined)) return batches.map((b) => element(b as number[]));
  }
  throw new HttpError(400, 'prompt must be a string, a list of strings, or token ids');
}
