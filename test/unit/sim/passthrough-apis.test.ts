/**
 * The passthrough APIs sim/ answers as llm-d-inference-sim does (their shapes are compared with the
 * real one in test/peers/sim-parity.test.ts): /tokenize, /v1/embeddings, /v1/messages; and the
 * router's plain-text 404 and 405.
 */
import { startSimulator, type Simulator } from '../../../sim/simulator';
import { postJson, readJson } from './helpers';

describe('sim/ passthrough APIs', () => {
  let sim: Simulator;
  let encoder: Simulator;
  beforeAll(async () => {
    sim = await startSimulator({ name: 'sim-decode-0', role: 'decode' });
    encoder = await startSimulator({ name: 'sim-encode-0', role: 'encode' });
  });
  afterAll(async () => {
    await sim.close();
    await encoder.close();
  });

  it('/tokenize counts the tokens of a prompt or of messages; both at once is a 400', async () => {
    const prompt = await readJson(await postJson(`${sim.url}/tokenize`, { model: 'm', prompt: 'one two three' }));
    expect(Object.keys(prompt).sort()).toEqual(['count', 'max_model_len', 'token_strs', 'tokens']);
    expect([prompt.max_model_len, prompt.count, prompt.token_strs]).toEqual([131072, 4, null]);
    expect(prompt.tokens).toHaveLength(4);
    const chat = await readJson(await postJson(`${sim.url}/tokenize`, { model: 'm', messages: [{ role: 'user', content: 'hi there' }] }));
    expect(chat.count).toBeGreaterThan(2);
    const both = await postJson(`${sim.url}/tokenize`, { prompt: 'x', messages: [] });
    expect(both.status).toBe(400);
    expect((await readJson(both)).error.message).toBe('both prompt and messages fields in tokenize request');
  });

  it('/v1/embeddings: one vector per input, of the asked dimensions, as floats or base64 float32', async () => {
    const res = await postJson(`${sim.url}/v1/embeddings`, { model: 'm', input: ['a b', 'c'], dimensions: 5 });
    const body = await readJson(res);
    expect(body).toMatchObject({ object: 'list', model: 'm', usage: { prompt_tokens: 5, total_tokens: 5 } });
    expect(body.data.map((d: { index: number; embedding: number[] }) => [d.index, d.embedding.length])).toEqual([
      [0, 5],
      [1, 5],
    ]);
    for (const v of body.data[0].embedding) expect(Math.abs(v)).toBeLessThanOrEqual(1);
    const b64 = await readJson(await postJson(`${sim.url}/v1/embeddings`, { input: [1, 2, 3], dimensions: 3, encoding_format: 'base64' }));
    const bytes = Buffer.from(b64.data[0].embedding, 'base64');
    const floats = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(4 * i));
    expect(floats).toHaveLength(3);
    expect(b64.model).toBe('sim-model');
    for (const bad of [{ input: '' }, { input: [] }, { input: 'x', dimensions: 0 }, { input: [{}] }]) {
      expect((await postJson(`${sim.url}/v1/embeddings`, bad)).status).toBe(400);
    }
  });

  it('/v1/embeddings is not served by an encoder (--mm-encoder-only registers no such route)', async () => {
    const res = await postJson(`${encoder.url}/v1/embeddings`, { input: 'x' });
    expect(res.status).toBe(404);
    expect(await res.text()).toBe('Not Found');
  });

  it('/v1/messages: the echo as an Anthropic message; max_tokens is required; no streaming', async () => {
    const res = await postJson(
      `${sim.url}/v1/messages`,
      { model: 'm', max_tokens: 2, system: 'be brief', messages: [{ role: 'user', content: [{ type: 'text', text: 'a b c' }] }] },
      { 'x-request-id': 'rid-9' },
    );
    expect(await readJson(res)).toEqual({
      id: 'msg_rid-9',
      type: 'message',
      role: 'assistant',
      content: [{ type: 'text', text: 'a b ' }],
      model: 'm',
      stop_reason: 'max_tokens',
      stop_sequence: null,
      usage: { input_tokens: expect.any(Number), cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 2 },
    });
    const noMax = await postJson(`${sim.url}/v1/messages`, { messages: [{ role: 'user', content: 'hi' }] });
    expect(noMax.status).toBe(400);
    expect((await readJson(noMax)).error.message).toBe('max_tokens is required');
    expect((await postJson(`${sim.url}/v1/messages`, { max_tokens: 5, stream: true, messages: [] })).status).toBe(400);
  });

  it("unknown paths and methods get the router's plain-text 404 and 405", async () => {
    const missing = await postJson(`${sim.url}/v1/nothing`, {});
    expect([missing.status, missing.headers.get('content-type'), await missing.text()]).toEqual([
      404,
      'text/plain; charset=utf-8',
      'Not Found',
    ]);
    const wrong = await fetch(`${sim.url}/v1/chat/completions`);
    expect([wrong.status, await wrong.text()]).toEqual([405, 'Method Not Allowed']);
  });
});
