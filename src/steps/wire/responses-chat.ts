/**
 * A Responses request as the chat request it stands for, to render it through
 * `<render>/v1/chat/completions/render` when the render service has no Responses route
 * (llm-d-inference-sim and vLLM's render service have none; render `responses_via`).
 *
 * The mapping is the one vLLM's own Responses endpoint applies before its chat template
 * (`construct_input_messages` in vLLM's responses utilities), so the token ids match what a
 * worker renders for the same request:
 * - `instructions` → a leading `system` message; a string `input` → one `user` message;
 * - a message item → its role and content, with Responses parts as chat parts (`input_text` and
 *   `output_text` → `text`, `input_image` → `image_url`; any other part as it came, for the render
 *   service to judge); an assistant turn's content is its first part's text, as vLLM keeps it;
 * - `function_call` (and `custom_tool_call`) → an assistant `tool_calls` entry, merged into the
 *   assistant message just before it; `function_call_output` (and `custom_tool_call_output`) → a
 *   `tool` message; `reasoning` → the assistant's `reasoning`;
 * - function `tools` in the chat shape (`tool_choice: "none"` drops them, as vLLM does), and
 *   `max_output_tokens` as `max_tokens`.
 *
 * Only fields that shape the prompt are carried. Values are copied, never rewritten, so the
 * client's big strings (inline images) stay placeholders that the body codec splices back.
 */
import type { JsonObject } from '../../pipeline/context';
import { BadRequestError } from '../../pipeline/errors';
import { isJsonObject } from './json';
import { RESPONSES_IMAGE_PART } from './responses-input';

type Message = JsonObject;
/** The real content of a body string (a big one may be a placeholder: RequestContext.text). */
type TextOf = (s: string) => string;

/** One Responses content part as a chat part. */
function chatPart(part: unknown): unknown {
  if (!isJsonObject(part)) return part;
  const type = part['type'];
  if ((type === 'input_text' || type === 'output_text') && typeof part['text'] === 'string') return { type: 'text', text: part['text'] };
  if (type === RESPONSES_IMAGE_PART && typeof part['image_url'] === 'string') {
    const imageUrl: JsonObject = { url: part['image_url'] };
    if (typeof part['detail'] === 'string') imageUrl['detail'] = part['detail'];
    return { type: 'image_url', image_url: imageUrl };
  }
  return part;
}

function chatContent(content: unknown): unknown {
  return Array.isArray(content) ? content.map(chatPart) : content;
}

/** A tool's output: a string, or parts of which only text has a chat equivalent in a tool message. */
function toolOutput(item: JsonObject, at: string): unknown {
  const output = item['output'];
  if (!Array.isArray(output)) return output;
  return output.map((part, i) => {
    if (isJsonObject(part) && part['type'] === RESPONSES_IMAGE_PART)
      // replace-media-urls and the image uuids see only message content; an image here would
      // leave the render answer's image count out of step with theirs.
      throw new BadRequestError(`${at}.output[${i}]: an input_image in a ${String(item['type'])} is not supported by the router`);
    return chatPart(part);
  });
}

function toolCall(item: JsonObject, text: TextOf): JsonObject {
  const custom = item['type'] === 'custom_tool_call';
  // A custom (freeform) tool's input rides as JSON arguments `{"input": ...}`, as vLLM sends it.
  const input = item['input'];
  const args = custom ? JSON.stringify({ input: typeof input === 'string' ? text(input) : input }) : item['arguments'];
  return { id: item['call_id'], type: 'function', function: { name: item['name'], arguments: args } };
}

function reasoningText(item: JsonObject, at: string): unknown {
  if (item['encrypted_content'] !== undefined && item['encrypted_content'] !== null)
    throw new BadRequestError(`${at}.encrypted_content: encrypted reasoning is not supported by the router`);
  for (const key of ['content', 'summary']) {
    const list = item[key];
    if (Array.isArray(list) && list.length > 0 && isJsonObject(list[0])) return list[0]['text'];
  }
  return '';
}

/** An assistant turn's text: vLLM keeps the first part's text only, as a string. */
function assistantText(content: unknown): unknown {
  if (!Array.isArray(content) || content.length === 0) return content;
  const first: unknown = content[0];
  return isJsonObject(first) && typeof first['text'] === 'string' ? first['text'] : content.map(chatPart);
}

const isMessageItem = (item: JsonObject): boolean =>
  item['type'] === 'message' || (item['type'] === undefined && typeof item['role'] === 'string');

/** Adds one input item: a new chat message, or a merge into the assistant message before it. */
function addItem(messages: Message[], item: unknown, at: string, text: TextOf): void {
  if (!isJsonObject(item)) {
    messages.push(item as Message);
    return;
  }
  const prev = messages[messages.length - 1];
  const prevAssistant = isJsonObject(prev) && prev['role'] === 'assistant' ? prev : undefined;
  const type = item['type'];
  if (type === 'function_call' || type === 'custom_tool_call') {
    const call = toolCall(item, text);
    const calls = prevAssistant?.['tool_calls'];
    if (prevAssistant && (calls === undefined || Array.isArray(calls))) {
      prevAssistant['tool_calls'] = [...((calls as unknown[] | undefined) ?? []), call];
    } else messages.push({ role: 'assistant', tool_calls: [call] });
    return;
  }
  if (type === 'function_call_output' || type === 'custom_tool_call_output') {
    messages.push({ role: 'tool', content: toolOutput(item, at), tool_call_id: item['call_id'] });
    return;
  }
  if (type === 'reasoning') {
    const reasoning = reasoningText(item, at);
    if (prevAssistant && prevAssistant['reasoning'] === undefined) prevAssistant['reasoning'] = reasoning;
    else messages.push({ role: 'assistant', reasoning });
    return;
  }
  if (isMessageItem(item)) {
    const content = item['role'] === 'assistant' ? assistantText(item['content']) : chatContent(item['content']);
    // An assistant turn completes the tool calls or reasoning just before it, as in vLLM.
    if (item['role'] === 'assistant' && prevAssistant && prevAssistant['content'] === undefined) {
      prevAssistant['content'] = content;
      return;
    }
    messages.push({ role: item['role'], content });
    return;
  }
  // Anything else goes as it came (a copy: a later merge must not touch the client body); the
  // render service answers for what it cannot read.
  messages.push({ ...item });
}

function chatTools(body: JsonObject): { tools?: unknown[]; tool_choice?: unknown } {
  const tools = body['tools'];
  const choice = body['tool_choice'];
  if (!Array.isArray(tools) || tools.length === 0 || choice === 'none') return {};
  const out: unknown[] = [];
  for (const tool of tools) {
    // Hosted tools (web search, file search, ...) have no chat form and add nothing to the prompt.
    if (!isJsonObject(tool) || tool['type'] !== 'function') continue;
    const fn: JsonObject = {};
    for (const key of ['name', 'description', 'parameters', 'strict']) if (tool[key] !== undefined) fn[key] = tool[key];
    out.push({ type: 'function', function: fn });
  }
  if (out.length === 0) return {};
  if (typeof choice === 'string') return { tools: out, tool_choice: choice };
  if (isJsonObject(choice) && choice['type'] === 'function' && typeof choice['name'] === 'string')
    return { tools: out, tool_choice: { type: 'function', function: { name: choice['name'] } } };
  return { tools: out };
}

/** The chat render body for a Responses body. Never mutates `body`. */
export function responsesAsChatRender(body: JsonObject, text: TextOf = (s) => s): JsonObject {
  const messages: Message[] = [];
  const instructions = body['instructions'];
  if (typeof instructions === 'string' && instructions !== '') messages.push({ role: 'system', content: instructions });
  const input = body['input'];
  if (typeof input === 'string') messages.push({ role: 'user', content: input });
  else if (Array.isArray(input)) input.forEach((item, i) => addItem(messages, item, `input[${i}]`, text));
  const chat: JsonObject = { model: body['model'], messages, ...chatTools(body) };
  if (typeof body['max_output_tokens'] === 'number') chat['max_tokens'] = body['max_output_tokens'];
  return chat;
}
