/** Reading fields of hostile request bodies without trusting their shape. */

import { HttpError } from './errors';

export type JsonObject = Record<string, unknown>;

export function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function requireObjectBody(json: unknown): JsonObject {
  if (!isObject(json)) throw new HttpError(400, 'request body must be a JSON object');
  return json;
}

/** Messages that are objects; anything else in the array is ignored. */
export function messagesOf(body: JsonObject): JsonObject[] {
  const messages = body.messages;
  if (!Array.isArray(messages)) return [];
  return messages.filter(isObject);
}

/** Content parts that are objects, or undefined for string (or missing) content. */
export function partsOf(message: JsonObject): JsonObject[] | undefined {
  return Array.isArray(message.content) ? message.content.filter(isObject) : undefined;
}

/** The text of a message: its string content, or its text parts joined by newlines. */
export function messageText(message: JsonObject): string {
  if (typeof message.content === 'string') return message.content;
  const texts: string[] = [];
  for (const part of partsOf(message) ?? []) {
    if (part.type === 'text' && typeof part.text === 'string') texts.push(part.text);
  }
  return texts.join('\n');
}

export function lastUserText(body: JsonObject): string {
  const messages = messagesOf(body);
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i].role === 'user') return messageText(messages[i]);
  }
  return '';
}

/** URLs of `image_url` parts across all messages, in order (parts without a URL are skipped, as upstream). */
export function imageUrlsOf(body: JsonObject): string[] {
  const urls: string[] = [];
  for (const message of messagesOf(body)) {
    for (const part of partsOf(message) ?? []) {
      if (part.type !== 'image_url' || !isObject(part.image_url)) continue;
      const url = part.image_url.url;
      if (typeof url === 'string' && url !== '') urls.push(url);
    }
  }
  return urls;
}

/** A positive integer limit, or undefined when absent/null; anything else is a 400. */
export function positiveInt(value: unknown, field: string): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new HttpError(400, `${field} must be a positive integer`);
  }
  return value;
}

/** Every string in every modality of an `mm_hashes` object (bounded by the body size). */
export function hashesOf(mmHashes: unknown): string[] {
  if (!isObject(mmHashes)) return [];
  const out: string[] = [];
  for (const list of Object.values(mmHashes)) {
    if (!Array.isArray(list)) continue;
    for (const hash of list) if (typeof hash === 'string') out.push(hash);
  }
  return out;
}

/** The `kv_transfer_params` that decide prefill/decode behaviour, from the right place per endpoint. */
export function kvParamsOf(body: JsonObject, generate: boolean): JsonObject | undefined {
  if (isObject(body.kv_transfer_params)) return body.kv_transfer_params;
  // vLLM's generate endpoint reads them from sampling_params.extra_args; the real sim accepts both.
  if (!generate) return undefined;
  const sampling = body.sampling_params;
  if (!isObject(sampling) || !isObject(sampling.extra_args)) return undefined;
  const kv = sampling.extra_args.kv_transfer_params;
  return isObject(kv) ? kv : undefined;
}

/** Token ids: an array of non-negative integers, else undefined. */
export function tokenIdsOf(value: unknown): number[] | undefined {
  if (!Array.isArray(value)) return undefined;
  for (const id of value) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) return undefined;
  }
  return value as number[];
}
