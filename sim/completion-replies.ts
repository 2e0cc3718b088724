/**
 * Wire shapes of /v1/chat/completions, /v1/completions and /inference/v1/generate answers.
 *
 * Generate (vLLM tokens-in, as llm-d-inference-sim answers it):
 * - non-streaming: `{"id":"gen-<rid>","object":"generate","created","model","request_id":"<rid>",
 *   "choices":[{"index":0,"finish_reason","token_ids":[...]}],"usage":{...},
 *   "kv_transfer_params"?: {...}, "ec_transfer_params": {...} | null}`
 * - streaming: one `{"request_id","choices":[{"index":0,"finish_reason":null,"token_ids":[id]}]}`
 *   per token, then one with `finish_reason` and `token_ids: []`, then (with
 *   `stream_options.include_usage`) `{"request_id","choices":[],"usage"}`, then `[DONE]`.
 */

import type { Endpoint, Generation } from './generation';
import { jsonReply, Reply, SSE_HEADERS, SseFrame, sseFrame } from './reply';
import type { JsonObject } from './request-fields';

export interface Timing {
  readonly timeToFirstTokenMs: number;
  readonly interTokenLatencyMs: number;
}

/** A non-streamed answer never waits longer than this, whatever the latencies multiply to. */
const MAX_SIMULATED_MS = 10 * 60 * 1000;

function usageOf(gen: Generation): JsonObject {
  const completion = gen.words.length > 0 ? gen.words.length : gen.tokenIds.length;
  return {
    prompt_tokens: gen.promptTokens,
    completion_tokens: completion,
    total_tokens: gen.promptTokens + completion,
  };
}

function outputCount(endpoint: Endpoint, gen: Generation): number {
  return endpoint === 'generate' ? gen.tokenIds.length : gen.words.length;
}

function nonStreaming(endpoint: Endpoint, gen: Generation, httpRequestId: string, created: number): JsonObject {
  const text = gen.words.join('');
  let answer: JsonObject;
  if (endpoint === 'chat') {
    answer = {
      id: `chatcmpl-${httpRequestId}`,
      object: 'chat.completion',
      created,
      model: gen.model,
      choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: gen.finishReason }],
      usage: usageOf(gen),
    };
  } else if (endpoint === 'completions') {
    answer = {
      id: `cmpl-${httpRequestId}`,
      object: 'text_completion',
      created,
      model: gen.model,
      choices: [{ index: 0, text, logprobs: null, finish_reason: gen.finishReason }],
      usage: usageOf(gen),
    };
  } else {
    answer = {
      id: `gen-${gen.requestId}`,
      object: 'generate',
      created,
      model: gen.model,
      request_id: gen.requestId,
      choices: [{ index: 0, finish_reason: gen.finishReason, token_ids: gen.tokenIds }],
      usage: usageOf(gen),
      // Not omitted when empty: the real sim's generate answer always has the key.
      ec_transfer_params: gen.ecTransferParams ?? null,
    };
  }
  if (gen.kvTransferParams) answer.kv_transfer_params = gen.kvTransferParams;
  if (gen.ecTransferParams) answer.ec_transfer_params = gen.ecTransferParams;
  return answer;
}

function streamChunks(endpoint: Endpoint, gen: Generation, httpRequestId: string, created: number): JsonObject[] {
  const chunks: JsonObject[] = [];
  if (endpoint === 'generate') {
    const base = { request_id: gen.requestId };
    for (const id of gen.tokenIds) {
      chunks.push({ ...base, choices: [{ index: 0, finish_reason: null, token_ids: [id] }] });
    }
    chunks.push({ ...base, choices: [{ index: 0, finish_reason: gen.finishReason, token_ids: [] }] });
    if (gen.includeUsage) chunks.push({ ...base, choices: [], usage: usageOf(gen) });
    return chunks;
  }
  const chat = endpoint === 'chat';
  const base = {
    id: chat ? `chatcmpl-${httpRequestId}` : `cmpl-${httpRequestId}`,
    object: chat ? 'chat.completion.chunk' : 'text_completion',
    created,
    model: gen.model,
  };
  gen.words.forEach((word, i) => {
    const choice = chat
      ? { index: 0, delta: i === 0 ? { role: 'assistant', content: word } : { content: word }, logprobs: null, finish_reason: null }
      : { index: 0, text: word, logprobs: null, finish_reason: null };
    chunks.push({ ...base, choices: [choice] });
  });
  const last = chat
    ? { index: 0, delta: {}, logprobs: null, finish_reason: gen.finishReason }
    : { index: 0, text: '', logprobs: null, finish_reason: gen.finishReason };
  chunks.push({ ...base, choices: [last] });
  if (gen.includeUsage) chunks.push({ ...base, choices: [], usage: usageOf(gen) });
  return chunks;
}

export function completionReply(endpoint: Endpoint, gen: Generation, httpRequestId: string, timing: Timing): Reply {
  const created = Math.floor(Date.now() / 1000);
  const tokens = outputCount(endpoint, gen);
  if (!gen.stream) {
    const simulated = timing.timeToFirstTokenMs + timing.interTokenLatencyMs * Math.max(0, tokens - 1);
    return jsonReply(200, nonStreaming(endpoint, gen, httpRequestId, created), Math.min(simulated, MAX_SIMULATED_MS));
  }
  const chunks = streamChunks(endpoint, gen, httpRequestId, created);
  const frames: SseFrame[] = chunks.map((chunk, i) => ({
    data: sseFrame(chunk),
    // Only token frames cost time; the closing frames follow the last token at once.
    delayMs: i === 0 ? timing.timeToFirstTokenMs : i < tokens ? timing.interTokenLatencyMs : 0,
  }));
  frames.push({ data: sseFrame('[DONE]'), delayMs: 0 });
  return { kind: 'stream', status: 200, headers: SSE_HEADERS, frames };
}
