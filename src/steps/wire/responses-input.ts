/**
 * The images of an OpenAI Responses request (reference §12.9): `input_image` parts inside
 * `input[].content[]`, whose `image_url` is the URL string itself (a `detail` sibling is kept).
 */
import type { JsonObject } from '../../pipeline/context';
import { isJsonObject } from './json';

export const RESPONSES_IMAGE_PART = 'input_image';

/** Every `input_image` part in body order, whatever its `image_url` holds. */
export function responsesImageParts(body: JsonObject): JsonObject[] {
  const input = body['input'];
  if (!Array.isArray(input)) return [];
  const out: JsonObject[] = [];
  for (const item of input) {
    if (!isJsonObject(item) || !Array.isArray(item['content'])) continue;
    for (const part of item['content'] as unknown[]) {
      if (isJsonObject(part) && part['type'] === RESPONSES_IMAGE_PART) out.push(part);
    }
  }
  return out;
}
