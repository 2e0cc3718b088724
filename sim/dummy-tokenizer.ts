/**
 * A deterministic stand-in tokenizer: words and single punctuation marks become ids from a stable
 * hash. Two simulators (or two runs) always agree, so a render instance and an encode instance
 * produce the same image hashes and the coordinator's cross-checks can be exercised.
 */

export const BOS_TOKEN_ID = 1;
/** The id repeated for every image placeholder position. */
export const IMAGE_PLACEHOLDER_TOKEN_ID = 32000;
/** Placeholder positions per image (a real vision model uses hundreds; tests want small bodies). */
export const IMAGE_PLACEHOLDER_LENGTH = 4;

const TOKEN_ID_MIN = 100;
const TOKEN_ID_MAX = 50000; // exclusive

/** FNV-1a, 32 bit, over UTF-8 bytes (the hash llm-d-inference-sim uses for its stub hashes). */
export function fnv32a(text: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}

export function tokenIdOf(piece: string): number {
  const id = TOKEN_ID_MIN + (fnv32a(piece) % (TOKEN_ID_MAX - TOKEN_ID_MIN));
  // A text token must never look like an image placeholder.
  return id === IMAGE_PLACEHOLDER_TOKEN_ID ? id + 1 : id;
}

const PIECE = /[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu;

/** Token ids of a text, without BOS. */
export function tokenizeText(text: string): number[] {
  const ids: number[] = [];
  for (const match of text.matchAll(PIECE)) ids.push(tokenIdOf(match[0]));
  return ids;
}

/**
 * Splits a reply into words-as-tokens whose concatenation is exactly the text, so streamed
 * deltas add up to the non-streamed answer.
 */
export function splitWords(text: string): string[] {
  const words = text.match(/\S+\s*/g) ?? [];
  const lead = /^\s+/.exec(text);
  if (lead && words.length > 0) words[0] = lead[0] + words[0];
  return words;
}

/** `sim_img_<i>_<fnv32a(url) hex>`, as llm-d-inference-sim's dummy renderer names images. */
export function stubImageHash(index: number, url: string): string {
  return `sim_img_${index}_${fnv32a(url).toString(16)}`;
}
