/**
 * `/v1/responses` and, with the `responsesRender` option only, `/v1/responses/render` (which
 * llm-d-inference-sim and vLLM's render service lack) (OpenAI Responses API): the request
 * is read as the chat request it stands for (its `input` as messages), generated and rendered as
 * chat, and answered in llm-d-inference-sim's Responses shape (test/peers/sim-parity.test.ts):
 * - non-streaming: `{"id":"resp_<rid>","model","object":"response","created_at","status":"completed",
 *   "instructions"?,"output":[{"type":"message","role":"assistant","status":"completed",
 *   "content":[{"type":"output_text","text"}]}],"text":{"format":{"type":"text"}},
 *   "usage":{"input_tokens","output_tokens","total_tokens"},"kv_transfer_params"?,"ec_transfer_params"?}`.
 *   The transfer params are vLLM's (its Responses answers carry `kv_transfer_params`), not the real
 *   sim's, which answers none: the one shape difference the parity test allows, so that the e2e
 *   suites can check what the pipeline does with them;
 * - streaming, as `event:` + `data:` frames: `response.created`, `response.in_progress`,
 *   `response.output_item.added`, `response.content_part.added`, one `response.output_text.delta`
 *   per token, `response.output_text.done`, `response.content_part.done`,
 *   `response.output_item.done`, `response.completed`; no `[DONE]`.
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

/** The response object; `output` and `usage` only once completed (in_progress has neither). */
function responseObject(gen: Generation, rid: string, createdAt: number, instructions: unknown, text: string | undefined): JsonObject {
  const answer: JsonObject = {
    id: `resp_${rid}`,
    model: gen.model,
    object: 'response',
    created_at: createdAt,
    status: text === undefined ? 'in_progress' : 'completed',
  };
  if (typeof instructions === 'string') answer.instructions = instructions;
  if (text !== undefined) {
    answer.output = [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] }];
  }
  answer.text = { format: { type: 'text' } };
  if (text !== undefined) {
    answer.usage = usageOf(gen);
    if (gen.kvTransferParams) answer.kv_transfer_params = gen.kvTransferParams;
    if (gen.ecTransferParams) answer.ec_transfer_params = gen.ecTransferParams;
  }
  return answer;
}

function eventFrame(type: string, payload: JsonObject): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...payload })}\n\n`;
}

export function responsesReply(gen: Generation, instructions: unknown, httpRequestId: string, timing: Timing): Reply {
  const createdAt = Math.floor(Date.now() / 1000);
  const text = gen.words.join('');
  const tokens = gen.words.length;
  if (!gen.stream) {
    const simulated = timing.timeToFirstTokenMs + timing.interTokenLatencyMs * Math.max(0, tokens - 1);
    return jsonReply(200, responseObject(gen, httpRequestId, createdAt, instructions, text), Math.min(simulated, MAX_SIMULATED_MS));
  }
  const itemId = `msg_${httpRequestId}`;
  const started = responseObject(gen, httpRequestId, createdAt, instructions, undefined);
  const item = (status: string, content: JsonObject[]) => ({ type: 'message', id: itemId, role: 'assistant', status, content });
  const at = (data: string, delayMs = 0): SseFrame => ({ data, delayMs });
  const frames: SseFrame[] = [
    at(eventFrame('response.created', { response: started })),
    at(eventFrame('response.in_progress', { response: started })),
    at(eventFrame('response.output_item.added', { item: item('in_progress', []) })),
    at(eventFrame('response.content_part.added', { item_id: itemId, part: { type: 'output_text' } })),
  ];
  gen.words.forEach((word, i) => {
    frames.push(
      at(
        eventFrame('response.output_text.delta', { item_id: itemId, delta: word }),
        i === 0 ? timing.timeToFirstTokenMs : timing.interTokenLatencyMs,
      ),
    );
  });
  const done = { type: 'output_text', text };
  const completed = responseObject(gen, httpRequestId, createdAt, instructions, text);
  completed.output = [item('completed', [done])];
  frames.push(
    at(eventFrame('response.output_text.done', { item_id: itemId, text })),
    at(eventFrame('response.content_part.done', { item_id: itemId, part: done })),
    at(eventFrame('response.output_item.done', { item: item('completed', [done]) })),
    at(eventFrame('response.completed', { response: completed })),
  );
  return { kind: 'stream', status: 200, headers: SSE_HEADERS, frames };
}
