/**
 * The stand-in for the EPP's conditional-decode gate (docs/conditional-decode.md), so the local
 * stack can exercise conditional-decode without an EPP.
 *
 * The real gate: a request carrying `Prefer: if-available` gets 412 unless the decode pod the EPP
 * picked already holds (part of) the prompt's prefix in its KV cache; the prefix index is fed only
 * by normal (non-conditional) decode requests that were routed. Here the simulator is the whole
 * decode pool, and "the prompt's prefix" is:
 *
 *   the model name + the first `prefixTokens` token ids of the prompt
 *
 * where the prompt's token ids are those the request carries (chat `tokens.token_ids` from render,
 * completions `prompt` as ids, generate `token_ids`), or else what the render simulator's dummy
 * tokenizer makes of the prompt (the same ids, so a probe sent with and a decode sent without render
 * output still agree). A shorter prompt is its own prefix. Image placeholders all tokenise alike, so
 * two prompts differing only in their images share a prefix (the real index hashes blocks of token
 * ids too).
 */
import { renderChat, renderCompletions } from './render';
import { isObject, tokenIdsOf, type JsonObject } from './request-fields';

export type PrefixEndpoint = 'chat' | 'completions' | 'generate';

/** The EPP's body for the miss (an ImmediateResponse whose body is the error text). */
export const PREFIX_MISS_BODY = 'inference error: PreconditionFailed - no decode worker has the requested KV cache';

export const DEFAULT_PREFIX_TOKENS = 16;
/** Prefixes remembered; the oldest is forgotten first (a real KV cache evicts too). */
export const MAX_CACHED_PREFIXES = 10_000;

/** RFC 7240: does a `Prefer` header ask for `if-available`? Tokens are case-insensitive; parameters ignored. */
export function prefersIfAvailable(header: string | string[] | undefined): boolean {
  const values = Array.isArray(header) ? header : header === undefined ? [] : [header];
  for (const value of values) {
    for (const pref of value.split(',')) {
      const token = (pref.split(';', 1)[0] ?? '').split('=', 1)[0]!.trim().toLowerCase();
      if (token === 'if-available') return true;
    }
  }
  return false;
}

function promptTokenIds(endpoint: PrefixEndpoint, body: JsonObject): number[] | undefined {
  try {
    switch (endpoint) {
      case 'chat': {
        const given = isObject(body.tokens) ? tokenIdsOf(body.tokens.token_ids) : undefined;
        return given && given.length > 0 ? given : renderChat(body).token_ids;
      }
      case 'completions':
        return renderCompletions(body)[0]?.token_ids;
      case 'generate':
        return tokenIdsOf(body.token_ids);
    }
  } catch {
    return undefined; // a body the worker will reject has no prefix
  }
}

/** The cache key of a request's prefix, or undefined when no prompt can be read from it. */
export function prefixKey(endpoint: PrefixEndpoint, body: unknown, prefixTokens: number): string | undefined {
  if (!isObject(body)) return undefined;
  const ids = promptTokenIds(endpoint, body);
  if (!ids || ids.length === 0) return undefined;
  const model = typeof body.model === 'string' ? body.model.slice(0, 256) : '';
  return `${model}\u0000${ids.slice(0, prefixTokens).join(',')}`;
}

/** The prefixes this (simulated) decode pool has served, bounded. */
export class PrefixCache {
  private readonly keys = new Set<string>();

  constructor(private readonly max: number = MAX_CACHED_PREFIXES) {}

  has(key: string | undefined): boolean {
    return key !== undefined && this.keys.has(key);
  }

  add(key: string | undefined): void {
    if (key === undefined) return;
    this.keys.delete(key); // re-inserted as the newest
    this.keys.add(key);
    while (this.keys.size > this.max) {
      const oldest = this.keys.values().next().value as string;
      this.keys.delete(oldest);
    }
  }

  clear(): void {
    this.keys.clear();
  }

  get size(): number {
    return this.keys.size;
  }
}
