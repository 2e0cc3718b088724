import type { RequestContext } from '../../pipeline/context';
import { isJsonObject } from './json';
import { RESPONSES_PATH } from './format';
import { responsesImageParts } from './responses-input';

/**
 * Tags the k-th `image_url` part of the decode body with the k-th entry's hash, so the decode worker
 * can find the encoder output by hash. Overwrites a client `uuid`, as upstream does.
 */
export function injectImageUuids(ctx: RequestContext): void {
  const entries = ctx.multimodalEntries;
  if (ctx.originalPath.includes(RESPONSES_PATH)) {
    // Responses (§12.9): positional over the input_image parts with a URL; surplus parts stay unstamped.
    let k = 0;
    for (const part of responsesImageParts(ctx.body)) {
      if (typeof part['image_url'] !== 'string') continue;
      if (k >= entries.length) return;
      part['uuid'] = entries[k]!.hash ?? '';
      k++;
    }
    return;
  }
  const messages = ctx.body['messages'];
  if (!Array.isArray(messages) || entries.length === 0) return;
  let k = 0;
  for (const msg of messages) {
    if (!isJsonObject(msg)) continue;
    const content = msg['content'];
    if (!Array.isArray(content)) continue;
    for (const part of content) {
      if (!isJsonObject(part) || part['type'] !== 'image_url') continue;
      if (k >= entries.length) return;
      part['uuid'] = entries[k]!.hash ?? '';
      k++;
    }
  }
}
