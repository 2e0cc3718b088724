/** The generation cases of the OpenAI SDK conformance suite: chat, completions, the Responses API. */
import type OpenAI from 'openai';
import { nextId, obj, openAiClient, uniqueNumber, withId, type ConformanceTarget } from './openai-target';
import { uniqueImage } from './unique-image';

export function defineGenerationCases(target: () => ConformanceTarget): void {
  let sdk: OpenAI;
  let t: ConformanceTarget;
  beforeAll(() => {
    t = target();
    sdk = openAiClient(t);
  });

  describe('chat', () => {
    it('plain: the answer, the request id in the response headers and on every leg (prefill then decode)', async () => {
      const id = nextId('chat');
      const { data, response, request_id } = await sdk.chat.completions
        .create({ model: t.model, messages: [{ role: 'user', content: `${id} hello from the sdk` }] }, withId(id))
        .withResponse();
      expect(data.object).toBe('chat.completion');
      expect(data.choices[0]!.message).toMatchObject({ role: 'assistant', content: `${id} hello from the sdk` });
      expect(data.usage?.prompt_tokens).toBeGreaterThan(0);
      expect(response.headers.get('x-request-id')).toBe(id);
      expect(request_id).toBe(id);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(prefill!.path).toBe('/v1/chat/completions');
      expect(obj(prefill!.json)['kv_transfer_params']).toMatchObject({ do_remote_decode: true });
      const [decode] = await t.legs('decode', id, 1);
      expect(obj(decode!.json)['kv_transfer_params']).toMatchObject({ do_remote_prefill: true });
    });

    it('a request id is made up when the client sends none, and it is the one the workers saw', async () => {
      const text = `${nextId('chat-noid')} who am i`;
      const { response } = await sdk.chat.completions
        .create({ model: t.model, messages: [{ role: 'user', content: text }] })
        .withResponse();
      const id = response.headers.get('x-request-id');
      expect(id).toMatch(/^[A-Za-z0-9-]{8,}$/);
      const [decode] = await t.legs('decode', id!, 1);
      expect(decode!.headers['x-request-id']).toBe(id);
    });

    it('streamed: the deltas make up the answer, without a usage chunk', async () => {
      const id = nextId('chat-stream');
      const words = `${id} one two three four five`;
      const stream = await sdk.chat.completions.create(
        { model: t.model, stream: true, messages: [{ role: 'user', content: words }] },
        withId(id),
      );
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      expect(chunks.length).toBeGreaterThan(2);
      expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(words);
      expect(chunks.at(-1)!.choices[0]?.finish_reason).toBe('stop');
      expect(chunks.every((c) => !c.usage)).toBe(true);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(obj(prefill!.json)['stream']).toBe(false);
      const [decode] = await t.legs('decode', id, 1);
      expect(obj(decode!.json)['stream']).toBe(true);
    });

    it('stream_options.include_usage: the usage arrives in the last chunk, which has no choices', async () => {
      const id = nextId('chat-usage');
      const words = `${id} count these words please`;
      const stream = await sdk.chat.completions.create(
        { model: t.model, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: words }] },
        withId(id),
      );
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      const last = chunks.at(-1)!;
      expect(last.choices).toEqual([]);
      expect(last.usage).toMatchObject({ prompt_tokens: expect.any(Number), completion_tokens: expect.any(Number) });
      expect(last.usage!.completion_tokens).toBeGreaterThan(0);
      expect(last.usage!.total_tokens).toBe(last.usage!.prompt_tokens + last.usage!.completion_tokens);
      expect(chunks.slice(0, -1).every((c) => !c.usage)).toBe(true);
      expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(words);
    });

    it('max_completion_tokens: the answer stops there (finish_reason length); decode got the limit, prefill one token', async () => {
      const id = nextId('chat-max');
      const data = await sdk.chat.completions.create(
        { model: t.model, max_completion_tokens: 2, messages: [{ role: 'user', content: `${id} a b c d e f g h` }] },
        withId(id),
      );
      expect(data.choices[0]!.finish_reason).toBe('length');
      const [decode] = await t.legs('decode', id, 1);
      expect(obj(decode!.json)['max_completion_tokens']).toBe(2);
      const [prefill] = await t.legs('prefill', id, 1);
      const p = obj(prefill!.json);
      expect(p['max_completion_tokens'] ?? p['max_tokens']).toBe(1);
    });

    it('an image as a data URL: one encode leg, its ec_transfer_params on prefill, the text answered', async () => {
      const id = nextId('chat-image');
      const data = await sdk.chat.completions.create(
        {
          model: t.model,
          max_tokens: 20,
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: `${id} describe the picture` },
                { type: 'image_url', image_url: { url: uniqueImage() } },
              ],
            },
          ],
        },
        withId(id),
      );
      expect(data.choices[0]!.message.content).toContain('describe the picture');
      const encodes = await t.legs('encode', id, 1);
      expect(encodes).toHaveLength(1);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(Object.keys(obj(obj(prefill!.json)['ec_transfer_params']))).toHaveLength(1);
    });

    it('tools and response_format reach the decode worker as the client sent them', async () => {
      const id = nextId('chat-tools');
      const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'The weather in a city',
            parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
          },
        },
      ];
      const responseFormat = { type: 'json_object' as const };
      const data = await sdk.chat.completions.create(
        {
          model: t.model,
          tools,
          tool_choice: 'none',
          response_format: responseFormat,
          messages: [{ role: 'user', content: `${id} what is the weather in Paris` }],
        },
        withId(id),
      );
      expect(data.choices[0]!.message.role).toBe('assistant');
      const [decode] = await t.legs('decode', id, 1);
      expect(obj(decode!.json)['tools']).toEqual(tools);
      expect(obj(decode!.json)['tool_choice']).toBe('none');
      expect(obj(decode!.json)['response_format']).toEqual(responseFormat);
    });
  });

  describe('completions', () => {
    /** The token ids decode got: render's for a text prompt. Echo workers answer them as `"1,2,3"`. */
    async function decodePrompt(id: string): Promise<number[]> {
      const [decode] = await t.legs('decode', id, 1);
      const prompt = obj(decode!.json)['prompt'] as number[];
      expect(prompt.length).toBeGreaterThan(1);
      expect(prompt.every((x) => Number.isInteger(x))).toBe(true);
      return prompt;
    }

    it('a string prompt: rendered to token ids for prefill and decode', async () => {
      const id = nextId('cmpl');
      const data = await sdk.completions.create({ model: t.model, prompt: `${id} complete me` }, withId(id));
      expect(data.object).toBe('text_completion');
      const [prefill] = await t.legs('prefill', id, 1);
      expect(prefill!.path).toBe('/v1/completions');
      const ids = await decodePrompt(id);
      expect(obj(prefill!.json)['prompt']).toEqual(ids);
      expect(data.choices[0]!.text).toBe(ids.join(','));
      expect(data.usage?.prompt_tokens).toBe(ids.length);
    });

    it('token ids as the prompt: forwarded as they are', async () => {
      const id = nextId('cmpl-ids');
      // Distinct ids per run, so that the prefix never matched before.
      const base = uniqueNumber();
      const ids = Array.from({ length: 8 }, (_, i) => 1000 + ((base + i * 11) % 30000));
      const data = await sdk.completions.create({ model: t.model, prompt: ids }, withId(id));
      expect(await decodePrompt(id)).toEqual(ids);
      expect(data.choices[0]!.text).toBe(ids.join(','));
      expect(data.usage?.prompt_tokens).toBe(ids.length);
    });

    it('streamed: the pieces make up the answer', async () => {
      const id = nextId('cmpl-stream');
      const stream = await sdk.completions.create({ model: t.model, prompt: `${id} stream these words back`, stream: true }, withId(id));
      const parts: string[] = [];
      for await (const chunk of stream) parts.push(chunk.choices[0]?.text ?? '');
      expect(parts.length).toBeGreaterThan(2);
      expect(parts.join('')).toBe((await decodePrompt(id)).join(','));
    });
  });

  describe('the Responses API', () => {
    it('plain: output_text, status completed; prefill and decode legs on /v1/responses', async () => {
      const id = nextId('resp');
      const { data, response } = await sdk.responses
        .create({ model: t.model, input: `${id} hello responses`, max_output_tokens: 20 }, withId(id))
        .withResponse();
      expect(data.object).toBe('response');
      expect(data.status).toBe('completed');
      expect(data.output_text).toBe(`${id} hello responses`);
      expect(response.headers.get('x-request-id')).toBe(id);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(prefill!.path).toBe('/v1/responses');
      expect(obj(prefill!.json)['kv_transfer_params']).toMatchObject({ do_remote_decode: true });
      const [decode] = await t.legs('decode', id, 1);
      expect(decode!.path).toBe('/v1/responses');
      expect(obj(decode!.json)['max_output_tokens']).toBe(20);
    });

    it('instructions and input items', async () => {
      const id = nextId('resp-items');
      const data = await sdk.responses.create(
        {
          model: t.model,
          instructions: 'answer briefly',
          input: [{ role: 'user', content: [{ type: 'input_text', text: `${id} items please` }] }],
        },
        withId(id),
      );
      expect(data.status).toBe('completed');
      expect(data.output_text).toContain('items please');
    });

    it('streamed: output_text deltas, then response.completed', async () => {
      const id = nextId('resp-stream');
      const words = `${id} one two three four`;
      const stream = await sdk.responses.create({ model: t.model, input: words, stream: true }, withId(id));
      const events = [];
      for await (const event of stream) events.push(event);
      const types = events.map((e) => e.type);
      expect(types).toContain('response.output_text.delta');
      expect(types.at(-1)).toBe('response.completed');
      const deltas = events.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.delta] : []));
      expect(deltas.join('')).toBe(words);
      const completed = events.at(-1)!;
      expect(completed.type === 'response.completed' && completed.response.status).toBe('completed');
    });

    it('input_image parts: one encode leg on /v1/responses with the image; prefill and decode get it too', async () => {
      const id = nextId('resp-image');
      const url = uniqueImage();
      const data = await sdk.responses.create(
        {
          model: t.model,
          max_output_tokens: 20,
          input: [
            {
              role: 'user',
              content: [
                { type: 'input_text', text: `${id} what is in this image` },
                { type: 'input_image', image_url: url, detail: 'auto' },
              ],
            },
          ],
        },
        withId(id),
      );
      expect(data.status).toBe('completed');
      expect(data.output_text).toContain('what is in this image');
      // llm-d-inference-sim's Responses route answers no ec_transfer_params (test/peers/sim-parity.test.ts):
      // what is checked is that the image went to the encoder and on.
      const encodes = await t.legs('encode', id, 1);
      expect(encodes).toHaveLength(1);
      expect(encodes[0]!.path).toBe('/v1/responses');
      expect(JSON.stringify(encodes[0]!.json)).toContain(url);
      const [prefill] = await t.legs('prefill', id, 1);
      expect(JSON.stringify(prefill!.json)).toContain(url);
      const [decode] = await t.legs('decode', id, 1);
      expect(JSON.stringify(decode!.json)).toContain(url);
    });
  });
}
