/**
 * Reading the render service's answers with the semantics of upstream's
 * typed Go decode: only the fields it declares are read and type-checked, JSON `null` leaves a
 * field at its zero value, and a wrong type anywhere in a read field fails the decode: an
 * UpstreamInvalidError (502, `upstream_invalid`), never the client's fault.
 */
import type { PlaceholderJson } from './features';
import { MODALITY_IMAGE } from './features';
import { decodeFirstJsonValue, isJsonObject, jsonTypeName } from './json';
import { UpstreamInvalidError } from '../../pipeline/errors';

/** What a chat render yields for the request's images, in order. */
export interface ChatRenderResult {
  /** `null` when the response carried no `token_ids`. */
  readonly tokenIds: number[] | null;
  readonly hashes: string[];
  readonly placeholders: PlaceholderJson[];
  /** `""` where the service sent null. */
  readonly kwargs: string[];
}

function fail(what: string): never {
  throw new UpstreamInvalidError(`decoding render response: ${what}`);
}

/** A body that is not JSON is the render service's fault like any other unusable answer. */
function decodeJson(body: Buffer): unknown {
  try {
    return decodeFirstJsonValue(body);
  } catch (err) {
    return fail((err as Error).message);
  }
}

/** Go `int`: any integer that fits in 64 bits. Null decodes to 0. */
function goInt(v: unknown, where: string): number {
  if (v === null || v === undefined) return 0;
  if (typeof v !== 'number' || !Number.isInteger(v) || Math.abs(v) >= 2 ** 63)
    fail(`${where}: expected an integer, got ${jsonTypeName(v)}`);
  return v;
}

/** Go `[]int`: null is "unset"; a null element decodes to 0. */
function goIntSlice(v: unknown, where: string): number[] | null {
  if (v === null || v === undefined) return null;
  if (!Array.isArray(v)) fail(`${where}: expected an array, got ${jsonTypeName(v)}`);
  for (let i = 0; i < v.length; i++) {
    const n = v[i];
    if (typeof n === 'number' && Number.isInteger(n) && Math.abs(n) < 2 ** 63) continue;
    v[i] = goInt(n, `${where}[${i}]`);
  }
  return v as number[];
}

/** Go `map[string][]T`: every modality is decoded (and type-checked); the image list is returned. */
function imageList<T>(v: unknown, where: string, item: (x: unknown, at: string) => T): T[] {
  if (v === null || v === undefined) return [];
  if (!isJsonObject(v)) fail(`${where}: expected an object, got ${jsonTypeName(v)}`);
  let image: T[] = [];
  for (const [modality, list] of Object.entries(v)) {
    if (list === null) continue;
    if (!Array.isArray(list)) fail(`${where}.${modality}: expected an array, got ${jsonTypeName(list)}`);
    const decoded = list.map((x, i) => item(x, `${where}.${modality}[${i}]`));
    if (modality === MODALITY_IMAGE) image = decoded;
  }
  return image;
}

function goString(v: unknown, where: string): string {
  if (v === null || v === undefined) return '';
  if (typeof v !== 'string') fail(`${where}: expected a string, got ${jsonTypeName(v)}`);
  return v;
}

function placeholder(v: unknown, where: string): PlaceholderJson {
  if (v === null || v === undefined) return { offset: 0, length: 0 };
  if (!isJsonObject(v)) fail(`${where}: expected an object, got ${jsonTypeName(v)}`);
  return { offset: goInt(v['offset'], `${where}.offset`), length: goInt(v['length'], `${where}.length`) };
}

/** The answer of `POST <address>/v1/chat/completions/render`. */
export function decodeChatRenderResponse(body: Buffer): ChatRenderResult {
  const v = decodeJson(body);
  if (v === null) return { tokenIds: null, hashes: [], placeholders: [], kwargs: [] };
  if (!isJsonObject(v)) fail(`expected an object, got ${jsonTypeName(v)}`);
  const tokenIds = goIntSlice(v['token_ids'], 'token_ids');
  const features = v['features'];
  if (features === null || features === undefined) return { tokenIds, hashes: [], placeholders: [], kwargs: [] };
  if (!isJsonObject(features)) fail(`features: expected an object, got ${jsonTypeName(features)}`);
  return {
    tokenIds,
    hashes: imageList(features['mm_hashes'], 'features.mm_hashes', goString),
    placeholders: imageList(features['mm_placeholders'], 'features.mm_placeholders', placeholder),
    kwargs: imageList(features['kwargs_data'], 'features.kwargs_data', goString),
  };
}

/**
 * The answer of `POST <address>/v1/completions/render`: one element per prompt, of which only
 * `token_ids` is read. Returns each element's token ids (`null` when absent).
 */
export function decodeCompletionsRenderResponse(body: Buffer): Array<number[] | null> {
  const v = decodeJson(body);
  if (v === null) return [];
  if (!Array.isArray(v)) fail(`expected an array, got ${jsonTypeName(v)}`);
  return v.map((el, i) => {
    if (el === null) return null;
    if (!isJsonObject(el)) fail(`[${i}]: expected an object, got ${jsonTypeName(el)}`);
    return goIntSlice(el['token_ids'], `[${i}].token_ids`);
  });
}
