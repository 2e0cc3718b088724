/**
 * Wire shapes of /v1/chat/completions, /v1/completions and /inference/v1/generate answers, as
 * llm-d-inference-sim answers them (test/peers/sim-parity.test.ts compares them):
 *
 * - chat / completions: choices without `logprobs`; `usage` with `prompt_tokens_details.cached_tokens`.
 *   Streamed, every chunk has `usage: null` but the last (with `stream_options.include_usage`:
 *   `choices: []` and the usage); a chat stream opens with a `{"role":"assistant"}` delta.
 * - generate (vLLM tokens-in), non-streaming: `{"choices":[{"index":0,"finish_reason","token_ids":[...]}],
 *   "request_id":"<rid>","kv_transfer_params"?: {...},"ec_transfer_params": {...} | null}`;
 *   streaming: one `{"request_id","choices":[{"index":0,"finish_reason","token_ids":[id]}]}` per
 *   token, the last with the finish reason, then `[DONE]`.
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
    prompt_tokens_details: { cached_tokens: 0 },
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
      choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: gen.finishReason }],
      usage: usageOf(gen),
    };
  } else if (endpoint === 'completions') {
    answer = {
      id: `cmpl-${httpRequestId}`,
      object: 'text_completion',
      created,
      model: gen.model,
      choices: [{ index: 0, text, finish_reason: gen.finishReason }],
      usage: usageOf(gen),
    };
  } else {
    // No id, object, created, model or usage: the real sim's generate answer has none.
    answer = {
      choices: [{ index: 0, finish_reason: gen.finishReason, token_ids: gen.tokenIds }],
      request_id: gen.requestId,
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
    // The last token's chunk carries the finish reason; no closing chunk, no usage chunk.
    const base = { request_id: gen.requestId };
    gen.tokenIds.forEach((id, i) => {
      const finish = i === gen.tokenIds.length - 1 ? gen.finishReason : null;
      chunks.push({ ...base, choices: [{ index: 0, finish_reason: finish, token_ids: [id] }] });
    });
    if (gen.tokenIds.length === 0) chunks.push({ ...base, choices: [{ index: 0, finish_reason: gen.finishReason, token_ids: [] }] });
    return chunks;
  }
  const chat = endpoint === 'chat';
  // `usage` is null on every chunk but the usage chunk.
  const base = {
    id: chat ? `chatcmpl-${httpRequestId}` : `cmpl-${httpRequestId}`,
    object: chat ? 'chat.completion.chunk' : 'text_completion',
    created,
    model: gen.model,
    usage: null,
  };
  // A chat stream opens with the role alone.
  if (chat) chunks.push({ ...base, choices: [{ index: 0, finish_reason: null, delta: { role: 'assistant' } }] });
  for (const word of gen.words) {
    const choice = chat ? { index: 0, finish_reason: null, delta: { content: word } } : { index: 0, finish_reason: null, text: word };
    chunks.push({ ...base, choices: [choice] });
  }
  const last = chat ? { index: 0, finish_reason: gen.finishReason, delta: {} } : { index: 0, finish_reason: gen.finishReason, text: '' };
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
  // Only token frames cost time; the role frame goes out at once, the closing frames follow the last token at once.
  const firstToken = endpoint === 'chat' ? 1 : 0;
  const frames: SseFrame[] = chunks.map((chunk, i) => ({
    data: sseFrame(chunk),
    delayMs: i < firstToken ? 0 : i === firstToken ? timing.timeToFirstTokenMs : i < firstToken + tokens ? timing.interTokenLatencyMs : 0,
  }));
  frames.push({ data: sseFrame('[DONE]'), delayMs: 0 });
  return { kind: 'stream', status: 200, headers: SSE_HEADERS, frames };
}
