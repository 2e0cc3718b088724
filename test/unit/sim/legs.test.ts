import { Simulator, startSimulator } from '../../../sim/simulator';
import { postJson, readJson, readSse } from './helpers';

const PREFILL_KV = {
  do_remote_decode: false,
  do_remote_prefill: true,
  remote_block_ids: ['DUMMY_ID'],
  remote_engine_id: 'DUMMY_ID',
  remote_host: 'DUMMY',
  remote_port: 1234,
  tp_size: 1,
};

describe('simulator: prefill and decode legs', () => {
  let sim: Simulator;

  beforeAll(async () => {
    sim = await startSimulator({ name: 'sim-pd-0', interTokenLatencyMs: 15 });
  });
  afterAll(async () => {
    await sim.close();
  });
  beforeEach(() => sim.clear());

  it('answers a chat prefill leg with remote_decode and the DUMMY kv_transfer_params', async () => {
    const res = await postJson(`${sim.url}/v1/chat/completions`, {
      model: 'any/model-name',
      messages: [{ role: 'user', content: 'one two three' }],
      max_tokens: 1,
      stream: false,
      kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-inference-pod')).toBe('sim-pd-0');
    const body = await readJson(res);
    expect(body).toMatchObject({ object: 'chat.completion', model: 'any/model-name' });
    expect(typeof body.id).toBe('string');
    expect(typeof body.created).toBe('number');
    expect(body.choices).toHaveLength(1);
    expect(body.choices[0].finish_reason).toBe('remote_decode');
    expect(body.choices[0].message.content).toBe('one ');
    expect(body.usage.completion_tokens).toBe(1);
    expect(body.kv_transfer_params).toEqual(PREFILL_KV);
  });

  it('echoes SGLang bootstrap fields on a completions prefill leg', async () => {
    const res = await postJson(`${sim.url}/v1/completions`, {
      model: 'm',
      prompt: [1, 2, 3],
      max_tokens: 1,
      stream: false,
      kv_transfer_params: { do_remote_decode: true, bootstrap_port: 8998, bootstrap_room: 'room-1' },
    });
    const body = await readJson(res);
    expect(body.object).toBe('text_completion');
    expect(body.choices[0].finish_reason).toBe('remote_decode');
    expect(body.kv_transfer_params).toEqual({ ...PREFILL_KV, bootstrap_port: 8998, bootstrap_room: 'room-1' });
  });

  it('reads generate kv_transfer_params from sampling_params.extra_args', async () => {
    const res = await postJson(`${sim.url}/inference/v1/generate`, {
      model: 'm',
      request_id: 'req-7',
      token_ids: [1, 5, 9],
      sampling_params: { max_tokens: 1, extra_args: { kv_transfer_params: { do_remote_decode: true } } },
      stream: false,
    });
    const body = await readJson(res);
    expect(body.request_id).toBe('req-7');
    expect(body.choices).toEqual([{ index: 0, finish_reason: 'remote_decode', token_ids: [1] }]);
    expect(body.kv_transfer_params).toEqual(PREFILL_KV);
    expect(body.ec_transfer_params).toBeNull();
  });

  it('refuses a streaming prefill leg with 400', async () => {
    const res = await postJson(`${sim.url}/v1/chat/completions`, {
      model: 'm',
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
      kv_transfer_params: { do_remote_decode: true },
    });
    expect(res.status).toBe(400);
    const body = await readJson(res);
    expect(body.error.message).toBe('Prefill does not support streaming');
    expect(body.error.code).toBe(400);
  });

  it('streams a decode leg token by token, ending with usage and [DONE], without kv params', async () => {
    const res = await postJson(`${sim.url}/v1/chat/completions`, {
      model: 'm',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: 'alpha beta gamma delta' }] },
      ],
      stream: true,
      stream_options: { include_usage: true },
      kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const { reads, data } = await readSse(res);
    expect(reads.length).toBeGreaterThan(1);
    expect(data[data.length - 1]).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    for (const chunk of chunks) {
      expect(chunk.object).toBe('chat.completion.chunk');
      expect(chunk.kv_transfer_params).toBeUndefined();
    }
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    expect(text).toBe('alpha beta gamma delta');
    expect(chunks.filter((c) => c.choices[0]?.delta?.content !== undefined)).toHaveLength(4);
    const finals = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(finals.map((c) => c.choices[0].finish_reason)).toEqual(['stop']);
    const usage = chunks[chunks.length - 1];
    expect(usage.choices).toEqual([]);
    expect(usage.usage.completion_tokens).toBe(4);
  });

  it('streams completions as text_completion chunks and caps output at max_tokens', async () => {
    const res = await postJson(`${sim.url}/v1/completions`, {
      model: 'm',
      prompt: 'a b c d e f',
      max_tokens: 3,
      stream: true,
    });
    const { data } = await readSse(res);
    expect(data[data.length - 1]).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    expect(chunks.every((c) => c.object === 'text_completion')).toBe(true);
    expect(chunks.map((c) => c.choices[0].text).join('')).toBe('a b c ');
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe('length');
  });

  it('streams generate token ids one per chunk, the last with the finish reason (as llm-d-inference-sim)', async () => {
    const res = await postJson(`${sim.url}/inference/v1/generate`, {
      token_ids: [11, 12, 13],
      sampling_params: { extra_args: { kv_transfer_params: { do_remote_prefill: true } } },
      stream: true,
    });
    const { data } = await readSse(res);
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    expect(chunks.map((c) => c.choices[0].token_ids)).toEqual([[11], [12], [13]]);
    expect(chunks.map((c) => c.choices[0].finish_reason)).toEqual([null, null, 'stop']);
  });

  it('answers a non-streaming decode leg with the echoed last user message', async () => {
    const res = await postJson(`${sim.url}/v1/chat/completions`, {
      model: 'm',
      messages: [
        { role: 'user', content: 'first question' },
        { role: 'assistant', content: 'an answer' },
        { role: 'user', content: 'second question here' },
      ],
      max_completion_tokens: 50,
      kv_transfer_params: { do_remote_prefill: true },
    });
    const body = await readJson(res);
    expect(body.choices[0]).toEqual({
      index: 0,
      message: { role: 'assistant', content: 'second question here' },
      finish_reason: 'stop',
    });
    expect(body.kv_transfer_params).toBeUndefined();
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + 3);
  });

  it('records the wire: headers lower-case, raw body and parsed json', async () => {
    const payload = { model: 'rec-model', messages: [{ role: 'user', content: 'hi' }] };
    await postJson(`${sim.url}/v1/chat/completions?x=1`, payload, { 'EPP-Profile': 'decode', 'X-Request-Id': 'rid-1' });
    const [recorded] = await sim.waitForRequests(1, 2000);
    expect(recorded.method).toBe('POST');
    expect(recorded.path).toBe('/v1/chat/completions');
    expect(recorded.url).toBe('/v1/chat/completions?x=1');
    expect(recorded.headers['epp-profile']).toBe('decode');
    expect(recorded.headers['x-request-id']).toBe('rid-1');
    expect(recorded.json).toEqual(payload);
    expect(JSON.parse(recorded.body.toString())).toEqual(payload);
    expect(recorded.closedEarly).toBe(false);
    expect(recorded.status).toBe(200);

    const models = await readJson(await fetch(`${sim.url}/v1/models`));
    expect(models.data.map((m: { id: string }) => m.id)).toContain('rec-model');
  });

  it('answers 400 on invalid JSON and still records the request', async () => {
    const res = await postJson(`${sim.url}/v1/completions`, '{"prompt": ');
    expect(res.status).toBe(400);
    expect((await readJson(res)).error.type).toBe('BadRequestError');
    const [recorded] = await sim.waitForRequests(1, 2000);
    expect(recorded.json).toBeUndefined();
    expect(recorded.body.toString()).toBe('{"prompt": ');
  });

  it('answers 400 on a generate request without sampling_params', async () => {
    const res = await postJson(`${sim.url}/inference/v1/generate`, { token_ids: [1] });
    expect(res.status).toBe(400);
    expect((await readJson(res)).error.message).toBe('Missing sampling_params field');
  });

  it('answers 413 above maxBodyBytes', async () => {
    const small = await startSimulator({ name: 'small', maxBodyBytes: 64 });
    try {
      const res = await postJson(`${small.url}/v1/completions`, { prompt: 'x'.repeat(200) });
      expect(res.status).toBe(413);
      await res.text();
      expect(small.requests).toHaveLength(1);
      expect(small.requests[0].body.length).toBe(0);
    } finally {
      await small.close();
    }
  });

  it('serves /health', async () => {
    const res = await fetch(`${sim.url}/health`);
    expect(res.status).toBe(200);
    await res.text();
  });
});

describe('simulator: random mode and bounds', () => {
  let sim: Simulator;
  beforeAll(async () => {
    sim = await startSimulator({ name: 'sim-random', mode: 'random', maxRecordedRequests: 2 });
  });
  afterAll(async () => {
    await sim.close();
  });

  it('makes up exactly max_tokens words and reports finish_reason length', async () => {
    const res = await postJson(`${sim.url}/v1/completions`, { model: 'm', prompt: 'ignored', max_tokens: 7 });
    const body = await readJson(res);
    expect(body.choices[0].text.trim().split(/\s+/)).toHaveLength(7);
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage.completion_tokens).toBe(7);
  });

  it('refuses a completions request without a prompt in random mode too', async () => {
    const res = await postJson(`${sim.url}/v1/completions`, { model: 'm' });
    expect(res.status).toBe(400);
    expect((await readJson(res)).error.message).toMatch(/prompt/);
  });

  it('refuses a non-positive max_tokens', async () => {
    const res = await postJson(`${sim.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 0,
    });
    expect(res.status).toBe(400);
    await res.text();
  });

  it('keeps only the newest maxRecordedRequests requests', async () => {
    sim.clear();
    for (const prompt of ['one', 'two', 'three']) {
      await (await postJson(`${sim.url}/v1/completions`, { prompt, max_tokens: 1 })).text();
    }
    expect(sim.requests.map((r) => (r.json as { prompt: string }).prompt)).toEqual(['two', 'three']);
  });

  it('echoes a well-formed x-request-id into the answer id and header', async () => {
    const res = await postJson(`${sim.url}/v1/completions`, { prompt: 'p', max_tokens: 1 }, { 'x-request-id': 'abc-123' });
    expect(res.headers.get('x-request-id')).toBe('abc-123');
    expect((await readJson(res)).id).toBe('cmpl-abc-123');
  });
});
