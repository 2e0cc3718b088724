import type { MultimodalEntry } from '../../pipeline/context';

/** The only modality the coordinator supports; every features map is keyed by it. */
export const MODALITY_IMAGE = 'image';

export interface PlaceholderJson {
  offset: number;
  length: number;
}

/** F0: what chat bodies carry under `tokens.features`. */
export interface FeaturesF0 {
  mm_hashes: { image: string[] };
  mm_placeholders: { image: PlaceholderJson[] };
}

/** F1: F0 plus the encoder outputs, for completions and generate bodies. */
export interface FeaturesF1 extends FeaturesF0 {
  kwargs_data: { image: Array<string | null> };
}

/**
 * Builds the multimodal features of a body from the request's entries, or
 * `null` when there are none (the field is then omitted). With `includeKwargs`, an entry whose
 * kwargs are `""` (or unset) is emitted as JSON `null`: vLLM reads null as "take it from the
 * encoder cache by hash", whereas `""` would be decoded as an (empty, broken) inline tensor.
 */
export function buildMmFeatures(entries: readonly MultimodalEntry[], includeKwargs: false): FeaturesF0 | null;
export function buildMmFeatures(entries: readonly MultimodalEntry[], includeKwargs: true): FeaturesF1 | null;
export function buildMmFeatures(entries: readonly MultimodalEntry[], includeKwargs: boolean): FeaturesF0 | FeaturesF1 | null;
export function buildMmFeatures(entries: readonly MultimodalEntry[], includeKwargs: boolean): FeaturesF0 | FeaturesF1 | null {
  if (entries.length === 0) return null;
  const hashes = new Array<string>(entries.length);
  const placeholders = new Array<PlaceholderJson>(entries.length);
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    hashes[i] = e.hash ?? '';
    placeholders[i] = { offset: e.placeholder?.offset ?? 0, length: e.placeholder?.length ?? 0 };
  }
  const f0: FeaturesF0 = { mm_hashes: { image: hashes }, mm_placeholders: { image: placeholders } };
  if (!includeKwargs) return f0;
  return { ...f0, kwargs_data: { image: entries.map((e) => (e.kwargsData ? e.kwargsData : null)) } };
}
