/**
 * The request shape the steps rely on, checked once after the body is parsed and before the
 * pipeline's first step (so before any side call, and before the async broker enqueues): a chat
 * request's `messages` and their content parts (replace-media-urls and render read them), a
 * completions `prompt` (render), a Responses `input` (replace-media-urls, render). A body that
 * breaks it gets a 400 naming the field and the rule, instead of a worker's bare refusal later.
 *
 * Only that: every other field (tools, response_format, unknown ones) is the worker's to judge,
 * and is passed through as it came.
 */
import { BadRequestError } from './errors';
import type { BodyCodec, JsonObject } from './json-body';
import { checkRequestLimits, type RequestLimits } from './request-limits';
import { RESPONSES_API_PATH } from './responses-request';

// The pipeline's inference paths (inference-request.ts); matched exactly, as there.
const CHAT_PATH = '/v1/chat/completions';
const COMPLETIONS_PATH = '/v1/completions';
const GENERATE_PATH = '/inference/v1/generate';

/**
 * Chat content part types: OpenAI's, and those vLLM's chat parser accepts besides (its
 * Responses-style parts, embeddings, audio and video URLs, `thinking`).
 */
const CHAT_PART_TYPES: ReadonlySet<string> = new Set([
  'text',
  'image_url',
  'input_audio',
  'file',
  'refusal',
  'thinking',
  'input_text',
  'output_text',
  'input_image',
  'image_embeds',
  'audio_embeds',
  'video_embeds',
  'prompt_embeds',
  'image_pil',
  'audio_url',
  'video_url',
]);

/** Content part types of a Responses message item (input and output messages). */
const RESPONSES_PART_TYPES: ReadonlySet<string> = new Set([
  'input_text',
  'input_image',
  'input_file',
  'input_audio',
  'output_text',
  'refusal',
]);

/** The string field each text-like part type carries. */
const TEXT_FIELD: Readonly<Record<string, string>> = {
  text: 'text',
  input_text: 'text',
  output_text: 'text',
  refusal: 'refusal',
  thinking: 'thinking',
};

/** A client's type name in a message: bounded, and JSON-quoted so no control character is echoed. */
const quoted = (s: string): string => JSON.stringify(s.length > 64 ? `${s.slice(0, 64)}...` : s);

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function fail(message: string): never {
  throw new BadRequestError(message);
}

/** One content part at `where` (e.g. `messages[0].content[1]`), of one of the `known` types. */
function checkPart(part: unknown, where: string, known: ReadonlySet<string>): void {
  if (!isObject(part)) fail(`${where} must be an object`);
  const type = part['type'];
  if (typeof type !== 'string') fail(`${where}.type must be a string`);
  if (!known.has(type)) fail(`${where}.type ${quoted(type)} is not a known content part type`);
  const textField = TEXT_FIELD[type];
  if (textField !== undefined && typeof part[textField] !== 'string') fail(`${where}.${textField} must be a string`);
  if (type === 'image_url') {
    // replace-media-urls inlines exactly these; a malformed one would reach render uncounted.
    const image = part['image_url'];
    if (!isObject(image)) fail(`${where}.image_url must be an object with a string url`);
    if (typeof image['url'] !== 'string') fail(`${where}.image_url.url must be a string`);
  } else if (type === 'input_image') {
    const url = part['image_url'];
    if (url !== undefined && url !== null && typeof url !== 'string') fail(`${where}.image_url must be a string`);
  }
}

/** A message's `content`: absent or null (an assistant turn with tool calls), a string, or parts. */
function checkContent(content: unknown, where: string, known: ReadonlySet<string>): void {
  if (content === undefined || content === null || typeof content === 'string') return;
  if (!Array.isArray(content)) fail(`${where} must be a string or an array of content parts`);
  for (let i = 0; i < content.length; i++) checkPart(content[i], `${where}[${i}]`, known);
}

function checkChat(body: JsonObject): void {
  const messages = body['messages'];
  if (!Array.isArray(messages) || messages.length === 0) fail('messages must be a non-empty array');
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (!isObject(m)) fail(`messages[${i}] must be an object`);
    if (typeof m['role'] !== 'string') fail(`messages[${i}].role must be a string`);
    checkContent(m['content'], `messages[${i}].content`, CHAT_PART_TYPES);
  }
}

const PROMPT_RULE = 'prompt must be a string, an array of strings, or an array of token ids';

function allNumbers(values: readonly unknown[]): boolean {
  for (const v of values) if (typeof v !== 'number') return false;
  return true;
}

function checkCompletions(body: JsonObject): void {
  const prompt = body['prompt'];
  if (typeof prompt === 'string') return;
  // vLLM takes prompt embeddings instead of a prompt; render then says what it cannot do.
  if ((prompt === undefined || prompt === null) && body['prompt_embeds'] !== undefined) return;
  if (!Array.isArray(prompt)) fail(PROMPT_RULE);
  if (prompt.length === 0) return;
  const first: unknown = prompt[0];
  if (typeof first === 'string') {
    for (const p of prompt) if (typeof p !== 'string') fail(PROMPT_RULE);
  } else if (typeof first === 'number') {
    if (!allNumbers(prompt)) fail(PROMPT_RULE);
  } else if (Array.isArray(first)) {
    // A batch of token prompts, as vLLM takes it.
    for (const p of prompt) if (!Array.isArray(p) || !allNumbers(p)) fail(PROMPT_RULE);
  } else {
    fail(PROMPT_RULE);
  }
}

/**
 * A Responses `input`: a string or a list of items. Message items (`type: "message"`, or no type
 * and a `role`, as the API's easy input form) need a string role and string or part content; every
 * other item type (function calls and their outputs, reasoning, references) is passed through.
 */
function checkResponses(body: JsonObject): void {
  const input = body['input'];
  if (typeof input === 'string') return;
  if (!Array.isArray(input)) fail('input must be a string or an array');
  for (let i = 0; i < input.length; i++) {
    const item: unknown = input[i];
    if (!isObject(item)) fail(`input[${i}] must be an object`);
    const type = item['type'];
    if (type !== 'message' && !(type === undefined && item['role'] !== undefined)) continue;
    if (typeof item['role'] !== 'string') fail(`input[${i}].role must be a string`);
    const content = item['content'];
    if (typeof content !== 'string' && !Array.isArray(content)) fail(`input[${i}].content must be a string or an array of content parts`);
    checkContent(content, `input[${i}].content`, RESPONSES_PART_TYPES);
  }
}

/**
 * Throws a {@link BadRequestError} for the first field of an inference request (`path`, query
 * stripped) that breaks the shape the steps rely on or one of the request limits.
 */
export function checkInferenceRequest(path: string, body: JsonObject, codec: BodyCodec, limits: RequestLimits): void {
  switch (path) {
    case CHAT_PATH:
      checkChat(body);
      return checkRequestLimits(body, limits, codec, 'boolean');
    case COMPLETIONS_PATH:
      checkCompletions(body);
      return checkRequestLimits(body, limits, codec, 'count');
    case RESPONSES_API_PATH:
      checkResponses(body);
      return checkRequestLimits(body, limits, codec, 'either');
    case GENERATE_PATH: {
      // Tokens-in: render checks the token ids and features; the sampling fields sit in sampling_params.
      checkRequestLimits(body, limits, codec, 'count');
      const sp = body['sampling_params'];
      if (isObject(sp)) checkRequestLimits(sp, limits, codec, 'count', 'sampling_params.');
      return;
    }
    default:
      return checkRequestLimits(body, limits, codec, 'either');
  }
}
