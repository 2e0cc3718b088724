import { IMAGE_PLACEHOLDER_TOKEN_ID, fnv32a } from '../../../sim/dummy-tokenizer';
import { Simulator, startSimulator } from '../../../sim/simulator';
import { postJson, readJson } from './helpers';

const IMG_A = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==';
const IMG_B = 'data:image/jpeg;base64,/9j/4AAQSkZJRgABAQ==';

const twoImageChat = {
  model: 'Qwen/Qwen3-VL-2B-Instruct',
  messages: [
    { role: 'system', content: 'You describe images.' },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'Compare these:' },
        { type: 'image_url', image_url: { url: IMG_A } },
        { type: 'text', text: 'and' },
        { type: 'image_url', image_url: { url: IMG_B, detail: 'low' } },
        { type: 'text', text: 'please.' },
      ],
    },
  ],
  max_tokens: 20,
  temperature: 0.5,
};

describe('simulator: render', () => {
  let sim: Simulator;
  beforeAll(async () => {
    sim = await startSimulator({ name: 'sim-render-0', role: 'render' });
  });
  afterAll(async () => {
    await sim.close();
  });

  it('renders a chat with two images: placeholders at their offsets, consistent with token_ids', async () => {
    const res = await postJson(`${sim.url}/v1/chat/completions/render`, twoImageChat, { 'x-request-id': 'r-1' });
    expect(res.status).toBe(200);
    const body = await readJson(res);
    expect(Array.isArray(body)).toBe(false);
    // llm-d-inference-sim's shape: the token ids and the features, nothing else.
    expect(Object.keys(body).sort()).toEqual(['features', 'token_ids']);
    expect(body.token_ids[0]).toBe(1);

    const hashes: string[] = body.features.mm_hashes.image;
    const placeholders: Array<{ offset: number; length: number }> = body.features.mm_placeholders.image;
    const kwargs: string[] = body.features.kwargs_data.image;
    expect(hashes).toEqual([`sim_img_0_${fnv32a(IMG_A).toString(16)}`, `sim_img_1_${fnv32a(IMG_B).toString(16)}`]);
    expect(placeholders).toHaveLength(2);
    expect(kwargs).toHaveLength(2);
    expect(kwargs.every((k) => typeof k === 'string' && k.length > 0)).toBe(true);

    const ids: number[] = body.token_ids;
    const [first, second] = placeholders;
    expect(first.offset + first.length).toBeLessThan(second.offset); // the text "and" sits between them
    expect(second.offset + second.length).toBeLessThan(ids.length); // "please." follows
    for (const { offset, length } of placeholders) {
      expect(length).toBeGreaterThan(0);
      expect(ids.slice(offset, offset + length).every((id) => id === IMAGE_PLACEHOLDER_TOKEN_ID)).toBe(true);
      expect(ids[offset - 1]).not.toBe(IMAGE_PLACEHOLDER_TOKEN_ID);
      expect(ids[offset + length]).not.toBe(IMAGE_PLACEHOLDER_TOKEN_ID);
    }
    const placeholderTotal = ids.filter((id) => id === IMAGE_PLACEHOLDER_TOKEN_ID).length;
    expect(placeholderTotal).toBe(first.length + second.length);
  });

  it('renders a text-only chat without features, deterministically', async () => {
    const chat = { model: 'm', messages: [{ role: 'user', content: 'Hello, world!' }] };
    const a = await readJson(await postJson(`${sim.url}/v1/chat/completions/render`, chat));
    const b = await readJson(await postJson(`${sim.url}/v1/chat/completions/render`, chat));
    expect(Object.keys(a)).toEqual(['token_ids']);
    expect(a.token_ids).toEqual(b.token_ids);
    expect(a.token_ids.length).toBeGreaterThan(3);
  });

  it('renders a completions prompt as an array with exactly one element', async () => {
    const res = await postJson(`${sim.url}/v1/completions/render`, { model: 'm', prompt: 'Say hi to the simulator' });
    expect(res.status).toBe(200);
    const body = await readJson(res);
    expect(Array.isArray(body)).toBe(true);
    expect(body).toHaveLength(1);
    expect(Object.keys(body[0])).toEqual(['token_ids']);
    expect(body[0].token_ids[0]).toBe(1);
    expect(body[0].token_ids).toHaveLength(1 + 5);
  });

  it('refuses a completions render without a usable prompt', async () => {
    const res = await postJson(`${sim.url}/v1/completions/render`, { model: 'm', prompt: { a: 1 } });
    expect(res.status).toBe(400);
    await readJson(res);
  });
});

describe('simulator: encode role', () => {
  let encoder: Simulator;
  let renderer: Simulator;
  beforeAll(async () => {
    encoder = await startSimulator({ name: 'sim-encode-0', role: 'encode' });
    renderer = await startSimulator({ name: 'sim-render-1', role: 'render' });
  });
  afterAll(async () => {
    await Promise.all([encoder.close(), renderer.close()]);
  });

  const descriptor = {
    peer_host: 'DUMMY',
    peer_port: 1234,
    size_bytes: 2359296,
    nixl_agent_metadata_b64: Buffer.from('NIXL_METADATA_PLACEHOLDER').toString('base64'),
  };

  it('keys ec_transfer_params by the hashes the coordinator sent in tokens.features', async () => {
    const res = await postJson(
      `${encoder.url}/v1/chat/completions`,
      {
        model: 'm',
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: IMG_A } }] }],
        tokens: {
          token_ids: [1, 32000, 32000, 32000],
          features: { mm_hashes: { image: ['hash-abc'] }, mm_placeholders: { image: [{ offset: 1, length: 3 }] } },
        },
        max_tokens: 1,
        stream: false,
      },
      { 'epp-profile': 'encode' },
    );
    const body = await readJson(res);
    expect(body.ec_transfer_params).toEqual({ 'hash-abc': descriptor });
    expect(body.choices[0].message.content).toBe('!');
    expect(body.choices[0].finish_reason).toBe('length');
  });

  it('without tokens.features uses the same stub hashes a render instance produces', async () => {
    const rendered = await readJson(await postJson(`${renderer.url}/v1/chat/completions/render`, twoImageChat));
    const res = await postJson(`${encoder.url}/v1/chat/completions`, { ...twoImageChat, max_tokens: 1 });
    const body = await readJson(res);
    expect(Object.keys(body.ec_transfer_params)).toEqual(rendered.features.mm_hashes.image);
  });

  it('keys generate ec_transfer_params by features.mm_hashes.image', async () => {
    const res = await postJson(`${encoder.url}/inference/v1/generate`, {
      model: 'm',
      token_ids: [1, 32000, 32000],
      features: {
        mm_hashes: { image: ['h0'] },
        mm_placeholders: { image: [{ offset: 1, length: 2 }] },
        kwargs_data: { image: [null] },
      },
      sampling_params: { max_tokens: 1 },
      stream: false,
    });
    const body = await readJson(res);
    expect(body.ec_transfer_params).toEqual({ h0: descriptor });
  });

  it('adds no ec_transfer_params to a text-only request', async () => {
    const res = await postJson(`${encoder.url}/v1/chat/completions`, {
      model: 'm',
      messages: [{ role: 'user', content: 'no images' }],
    });
    const body = await readJson(res);
    expect(body.ec_transfer_params).toBeUndefined();
  });
});

describe('simulator: the Responses render route, as real render services have it', () => {
  const responses = {
    model: 'm',
    instructions: 'You describe images.',
    input: [
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'Compare these:' },
          { type: 'input_image', image_url: IMG_A },
        ],
      },
    ],
  };

  it('is absent by default (404), as in llm-d-inference-sim and vLLM; the chat render route answers', async () => {
    const sim = await startSimulator({ name: 'sim-render-0', role: 'render' });
    try {
      const res = await postJson(`${sim.url}/v1/responses/render`, responses);
      expect(res.status).toBe(404);
      await res.arrayBuffer();
      const chat = await postJson(`${sim.url}/v1/chat/completions/render`, { model: 'm', messages: [{ role: 'user', content: 'hi' }] });
      expect(chat.status).toBe(200);
      await chat.arrayBuffer();
    } finally {
      await sim.close();
    }
  });

  it('with responsesRender, answers in the chat render shape, as the chat request it stands for', async () => {
    const sim = await startSimulator({ name: 'sim-render-0', role: 'render', responsesRender: true });
    try {
      const res = await postJson(`${sim.url}/v1/responses/render`, responses);
      expect(res.status).toBe(200);
      const body = await readJson(res);
      expect(body.features.mm_hashes.image).toHaveLength(1);
      const chat = await postJson(`${sim.url}/v1/chat/completions/render`, {
        model: 'm',
        messages: [
          { role: 'system', content: 'You describe images.' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Compare these:' },
              { type: 'image_url', image_url: { url: IMG_A } },
            ],
          },
        ],
      });
      expect((await readJson(chat)).token_ids).toEqual(body.token_ids);
    } finally {
      await sim.close();
    }
  });
});
