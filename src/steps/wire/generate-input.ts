/**
 * Validation of a client's tokens-in (`/inference/v1/generate`) request (the
 * render step's generate branch). The client supplies token ids and placeholder geometry directly here, so everything a
 * later step indexes or allocates from is bounded first. Every violation is a 400.
 */
import type { JsonObject, MultimodalEntry } from '../../pipeline/context';
import { BadRequestError } from '../../pipeline/errors';
import { MODALITY_IMAGE } from './features';
import { isJsonObject, jsonTypeName } from './json';
import { nonNegativeIntProblem } from './token-ids';

/** `sampling_params` and its `extra_args`, when present and not null, must be objects. */
export function validateSamplingParams(body: JsonObject): void {
  const sp = body['sampling_params'];
  if (sp === undefined || sp === null) return;
  if (!isJsonObject(sp)) throw new BadRequestError(`sampling_params must be an object, got ${jsonTypeName(sp)}`);
  const extra = sp['extra_args'];
  if (extra === undefined || extra === null) return;
  if (!isJsonObject(extra)) {
    throw new BadRequestError(`sampling_params.extra_args must be an object, got ${jsonTypeName(extra)}`);
  }
}

/**
 * `features[field].image` as an array, or `null` when the field or its image entry is absent or
 * null (a valid "no such modality"). A present value of the wrong type is a 400 rather than being
 * read as absent, which would silently treat a multimodal request as text-only.
 */
function imageArray(features: JsonObject, field: string): unknown[] | null {
  const raw = features[field];
  if (raw === undefined || raw === null) return null;
  if (!isJsonObject(raw)) throw new BadRequestError(`${field} must be an object`);
  const image = raw[MODALITY_IMAGE];
  if (image === undefined || image === null) return null;
  if (!Array.isArray(image)) throw new BadRequestError(`${field}[${MODALITY_IMAGE}] must be an array`);
  return image;
}

/**
 * Multimodal entries from a generate request's `features` (already known to be an object or
 * null). `mm_hashes.image` absent or empty means text-only. `mm_placeholders.image` is then
 * required and parallel; `kwargs_data` is optional (absent: every item comes from the encoder
 * cache), and a null item inside it is a cache hit. Both map to `kwargsData: ""`.
 */
export function extractMultimodalEntries(features: JsonObject | null): MultimodalEntry[] {
  if (features === null) return [];
  const hashes = imageArray(features, 'mm_hashes');
  if (hashes === null || hashes.length === 0) return [];
  const placeholders = imageArray(features, 'mm_placeholders');
  if (placeholders === null) {
    throw new BadRequestError(`mm_placeholders[${MODALITY_IMAGE}] is required when mm_hashes[${MODALITY_IMAGE}] is set`);
  }
  const kwargs = imageArray(features, 'kwargs_data');
  const n = hashes.length;
  if (placeholders.length !== n) {
    throw new BadRequestError(`features length mismatch: mm_hashes has ${n}, mm_placeholders has ${placeholders.length}`);
  }
  if (kwargs !== null && kwargs.length !== n) {
    throw new BadRequestError(`features length mismatch: mm_hashes has ${n}, kwargs_data has ${kwargs.length}`);
  }

  const entries = new Array<MultimodalEntry>(n);
  for (let i = 0; i < n; i++) {
    const hash = hashes[i];
    if (typeof hash !== 'string') throw new BadRequestError(`mm_hashes[${i}] must be a string`);
    const p = placeholders[i];
    if (!isJsonObject(p)) throw new BadRequestError(`mm_placeholders[${i}] must be an object`);
    const offsetProblem = nonNegativeIntProblem(p['offset']);
    if (offsetProblem !== null) throw new BadRequestError(`mm_placeholders[${i}].offset: ${offsetProblem}`);
    const lengthProblem = nonNegativeIntProblem(p['length']);
    if (lengthProblem !== null) throw new BadRequestError(`mm_placeholders[${i}].length: ${lengthProblem}`);
    let kwargsData = '';
    if (kwargs !== null) {
      const k = kwargs[i];
      if (typeof k === 'string') kwargsData = k;
      else if (k !== null) throw new BadRequestError(`kwargs_data[${i}] must be a string or null`);
    }
    entries[i] = {
      index: i,
      hash,
      kwargsData,
      placeholder: { offset: p['offset'] as number, length: p['length'] as number },
    };
  }
  return entries;
}

/** Every placeholder span `[offset, offset+length)` must lie inside the prompt. */
export function validatePlaceholderBounds(entries: readonly MultimodalEntry[], tokenCount: number): void {
  for (let i = 0; i < entries.length; i++) {
    const offset = entries[i]!.placeholder?.offset ?? 0;
    const length = entries[i]!.placeholder?.length ?? 0;
    if (offset >= tokenCount) {
      throw new BadRequestError(`mm_placeholders[${i}].offset ${offset} out of range for ${tokenCount} token_ids`);
    }
    if (length > tokenCount - offset) {
      throw new BadRequestError(`mm_placeholders[${i}] span (offset ${offset} + length ${length}) exceeds ${tokenCount} token_ids`);
    }
  }
}
