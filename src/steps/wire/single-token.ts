import type { JsonObject } from '../../pipeline/context';
import type { WireFormat } from './format';
import { isJsonObject } from './json';

/**
 * Turns a body into a single-output-token, non-streaming request for the synthetic prefill and
 * encode legs. The limits live in `sampling_params` for generate (created when
 * absent or not an object) and at the top level otherwise; `stream` and `stream_options` are
 * always top-level. `min_tokens` is removed rather than clamped so it can never exceed the cap.
 * `max_completion_tokens` is capped only if present, never added; `max_output_tokens` is left
 * alone for the other formats, as upstream; a Responses body gets `max_output_tokens: 1` and
 * `store: false` instead (§12.9).
 *
 * Mutates `body` (and, for generate, its `sampling_params` object) and returns the object the
 * token limits were written to.
 */
export function capSingleTokenOutput(body: JsonObject, format: WireFormat): JsonObject {
  if (format === 'responses') {
    // The Responses API's only output cap; a prefill or encode leg must not be stored either.
    body['max_output_tokens'] = 1;
    delete body['min_tokens'];
    body['stream'] = false;
    delete body['stream_options'];
    body['store'] = false;
    return body;
  }
  let target = body;
  if (format === 'generate') {
    const sp = body['sampling_params'];
    if (isJsonObject(sp)) {
      target = sp;
    } else {
      target = {};
      body['sampling_params'] = target;
    }
  }
  target['max_tokens'] = 1;
  delete target['min_tokens'];
  if (Object.prototype.hasOwnProperty.call(body, 'max_completion_tokens')) body['max_completion_tokens'] = 1;
  body['stream'] = false;
  delete body['stream_options'];
  return target;
}
