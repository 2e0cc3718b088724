/**
 * The simulator's stand-in for the EPP's conditional-decode gate (sim/prefix-cache.ts): 412 for a
 * `Prefer: if-available` request unless a normal request served the same prompt prefix before.
 */
import { parseArgs } from '../../../../sim/cli';
import { PREFIX_MISS_BODY, PrefixCache, prefersIfAvailable, prefixKey } from '../../../../sim/prefix-cache';
import { SimulatorConfigError, startSimulator, type Simulator } from '../../../../sim/simulator';
import { postJson } from '../../sim/helpers';

const IF_AVAILABLE = { prefer: 'if-available', 'epp-profile': 'decode' };

describe('simulator prefix gate (honourPreferIfAvailable)', () => {
  let sim: Simulator;
  beforeAll(async () => {
    sim = await startSimulator({ name: 'sim-decode-gate', role: 'decode', honourPreferIfAvailable: true, prefixTokens: 4 });
  });
  afterAll(async () => {
    await sim.close();
  });
  beforeEach(() => {
    sim.clear();
    sim.forgetPrefixes();
  });

  const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: 'm', messages: [{ role: 'user', content }], ...extra });

  it('misses with the EPP 412 (small text body) until a normal request served the prompt, then serves it', async () => {
    const miss = await postJson(`${sim.url}/v1/chat/completions`, chat('alpha beta'), IF_AVAILABLE);
    expect(miss.status).toBe(412);
    expect(await miss.text()).toBe(PREFIX_MISS_BODY);
    expect(sim.requests[0]!.status).toBe(412);

    const normal = await postJson(`${sim.url}/v1/chat/completions`, chat('alpha beta'), { 'epp-profile': 'decode' });
    expect(normal.status).toBe(200);
    await normal.text();

    const hit = await postJson(`${sim.url}/v1/chat/completions`, chat('alpha beta', { stream: true }), IF_AVAILABLE);
    expect(hit.status).toBe(200);
    expect(hit.headers.get('content-type')).toMatch(/text\/event-stream/);
    expect(await hit.text()).toContain('[DONE]');
  });

  it('the prefix is the first N prompt tokens: a shared prefix hits, a different one misses', async () => {
    // BOS + "user" + 2 words = 4 tokens: the whole prefix with prefixTokens 4.
    await (await postJson(`${sim.url}/v1/chat/completions`, chat('one two three four'))).text();
    expect((await postJson(`${sim.url}/v1/chat/completions`, chat('one two something else'), IF_AVAILABLE)).status).toBe(200);
    expect((await postJson(`${sim.url}/v1/chat/completions`, chat('zero two three four'), IF_AVAILABLE)).status).toBe(412);
    expect((await postJson(`${sim.url}/v1/chat/completions`, chat('one two three four', { model: 'other' }), IF_AVAILABLE)).status).toBe(
      412,
    );
  });

  it('rendered token ids and the text they came from name the same prefix', async () => {
    const body = chat('hello rendered world');
    await (await postJson(`${sim.url}/v1/chat/completions`, body)).text();
    const rendered = (await (await postJson(`${sim.url}/v1/chat/completions/render`, body)).json()) as { token_ids: number[] };
    const probe = { ...body, tokens: { token_ids: rendered.token_ids } };
    expect((await postJson(`${sim.url}/v1/chat/completions`, probe, IF_AVAILABLE)).status).toBe(200);
  });

  it('a conditional hit, a prefill leg and a failed request do not record prefixes', async () => {
    expect((await postJson(`${sim.url}/v1/completions`, { model: 'm', prompt: 'p q r s' }, IF_AVAILABLE)).status).toBe(412);
    const prefill = { model: 'm', prompt: 'p q r s', kv_transfer_params: { do_remote_decode: true }, max_tokens: 1 };
    expect((await postJson(`${sim.url}/v1/completions`, prefill)).status).toBe(200);
    expect((await postJson(`${sim.url}/v1/completions`, { model: 'm', prompt: 'p q r s', max_tokens: 0 })).status).toBe(400);
    expect((await postJson(`${sim.url}/v1/completions`, { model: 'm', prompt: 'p q r s' }, IF_AVAILABLE)).status).toBe(412);
  });

  it('generate prompts are keyed by token_ids; forgetPrefixes and POST /__sim/reset forget', async () => {
    const gen = { model: 'm', token_ids: [1, 2, 3, 4, 5], sampling_params: { max_tokens: 2 } };
    await (await postJson(`${sim.url}/inference/v1/generate`, gen)).text();
    expect((await postJson(`${sim.url}/inference/v1/generate`, gen, IF_AVAILABLE)).status).toBe(200);
    sim.forgetPrefixes();
    expect((await postJson(`${sim.url}/inference/v1/generate`, gen, IF_AVAILABLE)).status).toBe(412);
    await (await postJson(`${sim.url}/inference/v1/generate`, gen)).text();
    await (await postJson(`${sim.url}/__sim/reset`, {})).text();
    expect((await postJson(`${sim.url}/inference/v1/generate`, gen, IF_AVAILABLE)).status).toBe(412);
  });

  it('fault rules still come first (a non-412 error reaches the prober)', async () => {
    sim.setFaults([{ match: { profile: 'decode' }, status: 503, times: 1 }]);
    const res = await postJson(`${sim.url}/v1/chat/completions`, chat('whatever'), IF_AVAILABLE);
    expect(res.status).toBe(503);
    await res.text();
    sim.setFaults([]);
  });
});

describe('simulator without the gate', () => {
  it('ignores Prefer (the real llm-d-inference-sim has no such logic)', async () => {
    const sim = await startSimulator({ name: 'sim-plain' });
    try {
      const res = await postJson(`${sim.url}/v1/completions`, { model: 'm', prompt: 'x' }, IF_AVAILABLE);
      expect(res.status).toBe(200);
      await res.text();
    } finally {
      await sim.close();
    }
  });

  it('rejects bad gate options', async () => {
    await expect(startSimulator({ name: 's', honourPreferIfAvailable: 'yes' as never })).rejects.toBeInstanceOf(SimulatorConfigError);
    await expect(startSimulator({ name: 's', prefixTokens: 0 })).rejects.toBeInstanceOf(SimulatorConfigError);
  });
});

describe('prefix gate helpers', () => {
  it.each([
    ['if-available', true],
    ['If-Available', true],
    ['respond-async, if-available', true],
    ['if-available; foo=bar', true],
    ['wait=10, IF-AVAILABLE=1', true],
    ['respond-async', false],
    ['if-availablex', false],
    ['', false],
  ])('Prefer %j -> %s', (header, expected) => {
    expect(prefersIfAvailable(header)).toBe(expected);
  });

  it('prefixKey: undefined for bodies without a readable prompt', () => {
    expect(prefixKey('chat', null, 4)).toBeUndefined();
    expect(prefixKey('chat', { messages: 'x' }, 4)).toBeUndefined();
    expect(prefixKey('generate', { token_ids: [] }, 4)).toBeUndefined();
    expect(prefixKey('completions', { prompt: 'a b' }, 4)).toBeDefined();
  });

  it('PrefixCache is bounded, oldest forgotten first', () => {
    const cache = new PrefixCache(2);
    cache.add('a');
    cache.add('b');
    cache.add('a'); // refreshed
    cache.add('c');
    expect(cache.has('a')).toBe(true);
    expect(cache.has('b')).toBe(false);
    expect(cache.has('c')).toBe(true);
    expect(cache.size).toBe(2);
    expect(cache.has(undefined)).toBe(false);
  });

  it('CLI flags', () => {
    expect(parseArgs(['--port', '0', '--name', 'd', '--honour-prefer-if-available', 'true', '--prefix-tokens', '8'])).toMatchObject({
      honourPreferIfAvailable: true,
      prefixTokens: 8,
    });
    expect(() => parseArgs(['--port', '0', '--name', 'd', '--honour-prefer-if-available', 'yes'])).toThrow(SimulatorConfigError);
  });
});
