/**
 * A Responses body as the chat render body it stands for (render `responses_via: chat`), item by
 * item, as vLLM's Responses endpoint maps it before its chat template.
 */
import { BadRequestError } from '../../../../src/pipeline/errors';
import type { JsonObject } from '../../../../src/pipeline/context';
import { parseJsonBody } from '../../../../src/pipeline/json-body';
import { responsesAsChatRender } from '../../../../src/steps/wire/responses-chat';
import { at } from '../../../../launch/client';

const IMG = 'data:image/png;base64,iVBORw0KGgo=';
const chat = (extra: JsonObject): JsonObject => responsesAsChatRender({ model: 'm', ...extra });

describe('responsesAsChatRender', () => {
  it('a string input is one user message; instructions lead as a system message', () => {
    expect(chat({ input: 'hello', instructions: 'be brief' })).toEqual({
      model: 'm',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hello' },
      ],
    });
  });

  it('empty or non-string instructions add no message', () => {
    expect(chat({ input: 'hi', instructions: '' })['messages']).toEqual([{ role: 'user', content: 'hi' }]);
    expect(chat({ input: 'hi', instructions: null })['messages']).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it('message items keep their role; string content stays a string; parts become chat parts in order', () => {
    const out = chat({
      input: [
        { role: 'developer', content: 'dev rules' },
        { type: 'message', role: 'system', content: [{ type: 'input_text', text: 'sys' }] },
        {
          type: 'message',
          role: 'user',
          id: 'msg_1',
          status: 'completed',
          content: [
            { type: 'input_text', text: 'look' },
            { type: 'input_image', image_url: IMG, detail: 'low' },
            { type: 'input_image', image_url: 'https://example.com/a.png' },
          ],
        },
      ],
    });
    expect(out['messages']).toEqual([
      { role: 'developer', content: 'dev rules' },
      { role: 'system', content: [{ type: 'text', text: 'sys' }] },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'image_url', image_url: { url: IMG, detail: 'low' } },
          { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
        ],
      },
    ]);
  });

  it("an assistant output_text turn becomes an assistant message with the first part's text, as vLLM keeps it", () => {
    const out = chat({
      input: [
        { role: 'user', content: 'q' },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'a', annotations: [] }] },
        { role: 'user', content: 'again' },
      ],
    });
    expect(out['messages']).toEqual([
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'a' },
      { role: 'user', content: 'again' },
    ]);
  });

  it('function_call items become assistant tool_calls (consecutive calls merged); function_call_output a tool message', () => {
    const out = chat({
      input: [
        { role: 'user', content: 'weather in Paris and Rome?' },
        { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call', call_id: 'call_2', name: 'weather', arguments: '{"city":"Rome"}' },
        { type: 'function_call_output', call_id: 'call_1', output: '18C' },
        { type: 'function_call_output', call_id: 'call_2', output: [{ type: 'input_text', text: '21C' }] },
      ],
    });
    expect(out['messages']).toEqual([
      { role: 'user', content: 'weather in Paris and Rome?' },
      {
        role: 'assistant',
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_2', type: 'function', function: { name: 'weather', arguments: '{"city":"Rome"}' } },
        ],
      },
      { role: 'tool', content: '18C', tool_call_id: 'call_1' },
      { role: 'tool', content: [{ type: 'text', text: '21C' }], tool_call_id: 'call_2' },
    ]);
  });

  it('an assistant text then a function_call is one assistant message; reasoning joins the assistant turn', () => {
    const out = chat({
      input: [
        { role: 'user', content: 'q' },
        { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'think' }] },
        { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
        { role: 'assistant', content: 'done' },
      ],
    });
    expect(out['messages']).toEqual([
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        reasoning: 'think',
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
        content: 'done',
      },
    ]);
    const spoken = chat({
      input: [
        { role: 'assistant', content: 'let me check' },
        { type: 'function_call', call_id: 'c2', name: 'f', arguments: '{}' },
      ],
    });
    expect(spoken['messages']).toEqual([
      {
        role: 'assistant',
        content: 'let me check',
        tool_calls: [{ id: 'c2', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
    ]);
  });

  it('custom tool calls ride as function calls with {"input": ...} arguments, as vLLM sends them', () => {
    const out = chat({
      input: [
        { type: 'custom_tool_call', call_id: 'c1', name: 'sql', input: 'select 1' },
        { type: 'custom_tool_call_output', call_id: 'c1', output: '1' },
      ],
    });
    expect(out['messages']).toEqual([
      { role: 'assistant', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'sql', arguments: '{"input":"select 1"}' } }] },
      { role: 'tool', content: '1', tool_call_id: 'c1' },
    ]);
  });

  it('encrypted reasoning and an image in a tool output are 400s naming the place', () => {
    expect(() => chat({ input: [{ type: 'reasoning', summary: [], encrypted_content: 'x' }] })).toThrow(
      new BadRequestError('input[0].encrypted_content: encrypted reasoning is not supported by the router'),
    );
    expect(() =>
      chat({ input: [{ type: 'function_call_output', call_id: 'c', output: [{ type: 'input_image', image_url: IMG }] }] }),
    ).toThrow(/^input\[0\]\.output\[0\]: an input_image in a function_call_output is not supported by the router$/);
  });

  it('unknown items and parts go as they came, for the render service to judge; the client body is never changed', () => {
    const body: JsonObject = {
      model: 'm',
      input: [
        { type: 'item_reference', id: 'x' },
        { role: 'user', content: [{ type: 'input_file', file_data: 'Zm9v', filename: 'a.txt' }] },
        { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
      ],
    };
    const before = JSON.stringify(body);
    expect(responsesAsChatRender(body)['messages']).toEqual([
      { type: 'item_reference', id: 'x' },
      { role: 'user', content: [{ type: 'input_file', file_data: 'Zm9v', filename: 'a.txt' }] },
      { role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    ]);
    expect(JSON.stringify(body)).toBe(before);
  });

  it('function tools in the chat shape; hosted tools dropped; tool_choice mapped; "none" drops the tools', () => {
    const tools = [
      { type: 'function', name: 'weather', description: 'w', parameters: { type: 'object' }, strict: true },
      { type: 'web_search' },
    ];
    const fn = { type: 'function', function: { name: 'weather', description: 'w', parameters: { type: 'object' }, strict: true } };
    expect(chat({ input: 'x', tools, tool_choice: 'auto' })).toMatchObject({ tools: [fn], tool_choice: 'auto' });
    expect(chat({ input: 'x', tools, tool_choice: { type: 'function', name: 'weather' } })).toMatchObject({
      tool_choice: { type: 'function', function: { name: 'weather' } },
    });
    expect(chat({ input: 'x', tools, tool_choice: { type: 'web_search' } })).not.toHaveProperty('tool_choice');
    expect(chat({ input: 'x', tools, tool_choice: 'none' })).not.toHaveProperty('tools');
    expect(chat({ input: 'x', tools: [{ type: 'web_search' }] })).not.toHaveProperty('tools');
  });

  it('max_output_tokens as max_tokens; sampling, storage and streaming fields are not carried', () => {
    const out = chat({ input: 'x', max_output_tokens: 7, temperature: 0.2, store: true, stream: true, previous_response_id: null });
    expect(out).toEqual({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 7 });
  });

  it('a big inline image stays the client bytes: the placeholder is carried, and serialises back to the URL', () => {
    const bigImage = `data:image/png;base64,${'A'.repeat(64 * 1024)}`;
    const raw = Buffer.from(
      JSON.stringify({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_image', image_url: bigImage }] }] }),
    );
    const { body, codec } = parseJsonBody([raw]);
    const part = ((body['input'] as JsonObject[])[0]!['content'] as JsonObject[])[0]!;
    expect(part['image_url']).not.toBe(bigImage);
    const out = responsesAsChatRender(body);
    const sent = JSON.parse(Buffer.concat(codec.serialize(out)).toString('utf8')) as JsonObject;
    expect(sent['messages']).toEqual([{ role: 'user', content: [{ type: 'image_url', image_url: { url: bigImage } }] }]);
  });

  it('a big custom tool input is read through the codec before it is wrapped in {"input": ...}', () => {
    const big = 'x'.repeat(64 * 1024);
    const raw = Buffer.from(JSON.stringify({ model: 'm', input: [{ type: 'custom_tool_call', call_id: 'c', name: 'f', input: big }] }));
    const { body, codec } = parseJsonBody([raw]);
    const out = responsesAsChatRender(body, (s) => codec.text(s));
    const sent = JSON.parse(Buffer.concat(codec.serialize(out)).toString('utf8')) as JsonObject;
    expect(at(sent, 'messages', 0, 'tool_calls', 0, 'function', 'arguments')).toBe(JSON.stringify({ input: big }));
  });
});
