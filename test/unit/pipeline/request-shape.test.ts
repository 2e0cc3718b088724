import type { RespondDecision } from '../../../src/pipeline/decision';
import { BadRequestError } from '../../../src/pipeline/errors';
import { PipelineHandler } from '../../../src/pipeline/handler';
import { PLAIN_BODY_CODEC, type JsonObject } from '../../../src/pipeline/json-body';
import { DEFAULT_REQUEST_LIMITS } from '../../../src/pipeline/request-limits';
import { checkInferenceRequest } from '../../../src/pipeline/request-shape';
import { silentLogger } from '../../../src/observability/logger';

const shape = (path: string, body: JsonObject) => () => checkInferenceRequest(path, body, PLAIN_BODY_CODEC, DEFAULT_REQUEST_LIMITS);
const chat = (body: JsonObject) => shape('/v1/chat/completions', body);
const user = (content: unknown) => ({ messages: [{ role: 'user', content }] });

describe('chat: messages and content parts', () => {
  it.each([
    [{}, 'messages must be a non-empty array'],
    [{ messages: [] }, 'messages must be a non-empty array'],
    [{ messages: 'hi' }, 'messages must be a non-empty array'],
    [{ messages: { role: 'user' } }, 'messages must be a non-empty array'],
    [{ messages: ['hi'] }, 'messages[0] must be an object'],
    [{ messages: [{ role: 'user', content: 'a' }, { content: 'b' }] }, 'messages[1].role must be a string'],
    [{ messages: [{ role: 'user', content: 'a' }, { role: 'user' }, { role: 7, content: 'c' }] }, 'messages[2].role must be a string'],
    [user(42), 'messages[0].content must be a string or an array of content parts'],
    [user({ type: 'text', text: 'x' }), 'messages[0].content must be a string or an array of content parts'],
    [user(['hi']), 'messages[0].content[0] must be an object'],
    [user([{ text: 'x' }]), 'messages[0].content[0].type must be a string'],
    [user([{ type: 'text', text: 'a' }, { type: 'foo' }]), 'messages[0].content[1].type "foo" is not a known content part type'],
    [user([{ type: 'text', text: 7 }]), 'messages[0].content[0].text must be a string'],
    [user([{ type: 'text' }]), 'messages[0].content[0].text must be a string'],
    [user([{ type: 'image_url', image_url: 'http://x/y.png' }]), 'messages[0].content[0].image_url must be an object with a string url'],
    [user([{ type: 'image_url', image_url: { url: 5 } }]), 'messages[0].content[0].image_url.url must be a string'],
    [user([{ type: 'refusal', refusal: null }]), 'messages[0].content[0].refusal must be a string'],
  ])('%j -> %s', (body, message) => {
    expect(chat(body as JsonObject)).toThrow(BadRequestError);
    expect(chat(body as JsonObject)).toThrow(message);
  });

  it('an unknown type is echoed bounded and JSON-quoted (no control character)', () => {
    expect(chat(user([{ type: `a\u0000b${'z'.repeat(200)}` }]))).toThrow(/type "a\\u0000bz{61}\.\.\." is not a known content part type$/);
  });

  it.each([
    ['plain', { messages: [{ role: 'user', content: 'hi' }] }],
    [
      'an assistant turn with tool calls and no content',
      {
        messages: [
          { role: 'user', content: 'x' },
          { role: 'assistant', content: null, tool_calls: [{ id: 't' }] },
        ],
      },
    ],
    [
      'every kind of part',
      user([
        { type: 'text', text: 'a' },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'low' } },
        { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } },
        { type: 'video_url', video_url: { url: 'http://v' } },
        { type: 'file', file: { file_data: 'x' } },
      ]),
    ],
    [
      'tools, response_format and unknown fields, whatever their shape',
      { ...user('x'), tools: 'not ours to judge', response_format: 42, some_vendor_field: { deep: [1] } },
    ],
  ])('%s passes', (_what, body) => {
    expect(chat(body as JsonObject)).not.toThrow();
  });
});

describe('completions: prompt', () => {
  const RULE = 'prompt must be a string, an array of strings, or an array of token ids';
  const completions = (body: JsonObject) => shape('/v1/completions', body);

  it.each([
    [{}],
    [{ prompt: 42 }],
    [{ prompt: null }],
    [{ prompt: { text: 'x' } }],
    [{ prompt: ['a', 1] }],
    [{ prompt: [1, 'a'] }],
    [{ prompt: [[1], 'a'] }],
    [{ prompt: [[1, 'a']] }],
    [{ prompt: [true] }],
  ])('%j -> 400', (body) => {
    expect(completions(body)).toThrow(RULE);
  });

  it.each([
    [{ prompt: 'hi' }],
    [{ prompt: ['a', 'b'] }],
    [{ prompt: [1, 2, 3] }],
    [{ prompt: [[1, 2], [3]] }],
    [{ prompt: [] }],
    [{ prompt_embeds: 'AAAA' }],
  ])('%j passes (render judges what it can tokenise)', (body) => {
    expect(completions(body)).not.toThrow();
  });
});

describe('Responses: input items', () => {
  const responses = (body: JsonObject) => shape('/v1/responses', body);

  it.each([
    [{}, 'input must be a string or an array'],
    [{ input: 42 }, 'input must be a string or an array'],
    [{ input: { role: 'user' } }, 'input must be a string or an array'],
    [{ input: ['hi'] }, 'input[0] must be an object'],
    [{ input: [{ role: 5, content: 'x' }] }, 'input[0].role must be a string'],
    [{ input: [{ type: 'message', content: 'x' }] }, 'input[0].role must be a string'],
    [{ input: [{ role: 'user' }] }, 'input[0].content must be a string or an array of content parts'],
    [
      { input: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }] },
      'input[0].content[0].type "text" is not a known content part type',
    ],
    [{ input: [{ role: 'user', content: [{ type: 'input_text', text: 1 }] }] }, 'input[0].content[0].text must be a string'],
    [
      { input: [{ role: 'user', content: [{ type: 'input_image', image_url: { url: 'x' } }] }] },
      'input[0].content[0].image_url must be a string',
    ],
  ])('%j -> %s', (body, message) => {
    expect(responses(body as JsonObject)).toThrow(message);
  });

  it('message items as the Responses API defines them pass; other item types pass through', () => {
    const input = [
      { role: 'system', content: 'be brief' },
      {
        type: 'message',
        role: 'user',
        content: [
          { type: 'input_text', text: 'look' },
          { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'auto' },
        ],
      },
      {
        type: 'message',
        role: 'assistant',
        content: [
          { type: 'output_text', text: 'ok', annotations: [] },
          { type: 'refusal', refusal: 'no' },
        ],
      },
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c1', output: 'done' },
      { type: 'reasoning', summary: [] },
      { type: 'item_reference', id: 'x' },
    ];
    expect(responses({ input })).not.toThrow();
    expect(responses({ input: 'hi', tools: [{ type: 'web_search' }], text: { format: { type: 'json_object' } } })).not.toThrow();
  });
});

describe('the shape check in the handler', () => {
  it('refuses before the first step with a 400 in the OpenAI error shape', async () => {
    let ran = false;
    const h = new PipelineHandler({
      steps: [{ type: 'render', execute: async () => void (ran = true) }],
      maxBodyBytes: 4096,
      log: silentLogger(),
    });
    const d = (await h
      .begin({ method: 'POST', path: '/v1/chat/completions?x=1', headers: { 'x-request-id': 'shape-1' } })!
      .complete(Buffer.from(JSON.stringify({ model: 'm', messages: 'hello' })))) as RespondDecision;
    expect(ran).toBe(false);
    expect(d.status).toBe(400);
    expect(JSON.parse((d.body as Buffer).toString())).toEqual({
      error: { message: 'messages must be a non-empty array (request_id: shape-1)', type: 'invalid_request_error', param: null, code: 400 },
    });
    expect(d.metadata).toMatchObject({ error_class: 'bad_request', error_step: 'parse' });
  });
});
