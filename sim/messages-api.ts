/**
 * `/v1/messages` (Anthropic Messages), which llm-d-inference-sim serves and the coordinator passes
 * to decode as it came: the request is generated as the chat request it stands for (`system`
 * first), and answered in the real sim's shape:
 * `{"id":"msg_<rid>","type":"message","role":"assistant","content":[{"type":"text","text"}],"model",
 * "stop_reason":"end_turn"|"max_tokens","stop_sequence":null,"usage":{"input_tokens",
 * "cache_creation_input_tokens","cache_read_input_tokens","output_tokens"}}`. Not streamed: a
 * `stream: true` request gets a 400 saying so.
 */

import { HttpError } from './errors';
import type { Generation } from './generation';
import { jsonReply, type Reply } from './reply';
import { isObject, type JsonObject } from './request-fields';

export const MESSAGES_PATH = '/v1/messages';

/** The chat request a Messages request stands for; throws the real sim's 400s. */
export function messagesAsChat(body: JsonObject): JsonObject {
  if (body.max_tokens === undefined || body.max_tokens === null) throw new HttpError(400, 'max_tokens is required');
  if (body.stream === true) throw new HttpError(400, 'sim/ answers /v1/messages without streaming');
  if (!Array.isArray(body.messages)) throw new HttpError(400, 'messages must be an array');
  const messages: JsonObject[] = body.messages.filter(isObject);
  const system = typeof body.system === 'string' ? [{ role: 'system', content: body.system }] : [];
  return { model: body.model, max_tokens: body.max_tokens, messages: [...system, ...messages] };
}

export function messagesReply(gen: Generation, httpRequestId: string): Reply {
  return jsonReply(200, {
    id: `msg_${httpRequestId}`,
    type: 'message',
    role: 'assistant',
    content: [{ type: 'text', text: gen.words.join('') }],
    model: gen.model,
    stop_reason: gen.finishReason === 'length' ? 'max_tokens' : 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: gen.promptTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: gen.words.length },
  });
}
