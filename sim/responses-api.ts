/**
 * `/v1/responses` and, with the `responsesRender` option only, `/v1/responses/render` (which
 * llm-d-inference-sim and vLLM's render service lack) (OpenAI Responses API): the request
 * is read as the chat request it stands for (its `input` as messages), generated and rendered as
 * chat, and answered in the Responses shape:
 * - non-streaming: `{"id":"resp-<rid>","object":"response","created_at","model","status":"completed",
 *   "output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text"}]}],
 *   "usage":{"input_tokens","output_tokens","total_tokens"}, "kv_transfer_params"?}`;
 * - streaming: `response.created`, one `response.output_text.delta` per token, `response.completed`
 *   (each as `event:` + `data:` frames), then `data: [DONE]`.
 */

import type { Timing } from './completion-replies';
import type { Generation } from './generation';
import { jsonReply, Reply, SSE_HEADERS, SseFrame } from './reply';
import { isObject, JsonObject } from './request-fields';
import { HttpError } from './errors';

export const RESPONSES_PATH = '/v1/responses';
export const RESPONSES_RENDER_PATH = '/v1/responses/render';

const MAX_SIMULATED_MS = 10 * 60 * 1000;

/** One `input` content part as a chat part (`input_text` -> text, `input_image` -> image_url). */
function chatPart(part: JsonObject): JsonObject | undefined {
  if ((part.type === 'input_text' || part.type === 'output_text') && typeof part.text === 'string')
    return { type: 'text', text: part.text };
  if (part.type === 'input_image' && typeof part.image_url === 'string') return { type: 'image_url', image_url: { url: part.image_url } };
  return undefined;
}

/** The chat request a Responses request stands for; the transfer and sampling fields carry over. */
export function responsesAsChat(body: JsonObject): JsonObject {
  const input = body.input;
  let messages: JsonObject[];
  if (typeof input === 'string') messages = [{ role: 'user', content: input }];
  else if (Array.isArray(input)) {
    messages = input.filter(isObject).map((item) => ({
      role: typeof item.role === 'string' ? item.role : 'user',
      content:
        typeof item.content === 'string'
          ? item.content
          : Array.isArray(item.content)
            ? item.content
                .filter(isObject)
                .map(chatPart)
                .filter((p) => p !== undefined)
            : '',
    }));
  } else throw new HttpError(400, 'input must be a string or an array');
  const chat: JsonObject = { ...body, messages };
  delete chat.input;
  delete chat.max_output_tokens;
  if (typeof body.max_output_tokens === 'number') chat.max_tokens = body.max_output_tokens;
  if (typeof body.instructions === 'string') messages.unshift({ role: 'system', content: body.instructions });
  return chat;
}

function usageOf(gen: Generation): JsonObject {
  return { input_tokens: gen.promptTokens, output_tokens: gen.words.length, total_tokens: gen.promptTokens + gen.words.length };
}

function responseObject(gen: Generation, id: string, createdAt: number, status: string, text: string): JsonObject {
  const answer: JsonObject = {
    id,
    object: 'response',
    created_at: createdAt,
    model: gen.model,
    status,
    output:
      status === 'in_progress'
        ? []
        : [
            {
              type: 'message',
              id: `msg-${id}`,
              status: 'completed',
              role: 'assistant',
              content: [{ type: 'output_text', text, annotations: [] }],
            },
          ],
    usage: status === 'in_progress' ? null : usageOf(gen),
  };
  if (gen.kvTransferParams) answer.kv_transfer_params = gen.kvTransferParams;
  if (gen.ecTransferParams) answer.ec_transfer_params = gen.ecTransferParams;
  return answer;
}

function eventFrame(type: string, payload: JsonObject): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...payload })}\n\n`;
}

export function responsesReply(gen: Generation, httpRequestId: string, timing: Timing): Reply {
  const createdAt = Math.floor(Date.now() / 1000);
  const id = `resp-${httpRequestId}`;
  const text = gen.words.join('');
  const tokens = gen.words.length;
  if (!gen.stream) {
    const simulated = timing.timeToFirstTokenMs + timing.interTokenLatencyMs * Math.max(0, tokens - 1);
    return jsonReply(200, responseObject(gen, id, createdAt, 'completed', text), Math.min(simulated, MAX_SIMULATED_MS));
  }
  const frames: SseFrame[] = [
    { data: eventFrame('response.created', { response: responseObject(gen, id, createdAt, 'in_progress', '') }), delayMs: 0 },
  ];
  gen.words.forEach((word, i) => {
    frames.push({
      data: eventFrame('response.output_text.delta', { item_id: `msg-${id}`, output_index: 0, content_index: 0, delta: word }),
      delayMs: i === 0 ? timing.timeToFirstTokenMs : timing.interTokenLatencyMs,
    });
  });
  frames.push({ data: eventFrame('response.completed', { response: responseObject(gen, id, createdAt, 'completed', text) }), delayMs: 0 });
  frames.push({ data: 'data: [DONE]\n\n', delayMs: 0 });
  return { kind: 'stream', status: 200, headers: SSE_HEADERS, frames };
}
