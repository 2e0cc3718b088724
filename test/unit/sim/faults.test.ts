import { Simulator, SimulatorConfigError, startSimulator } from '../../../sim/simulator';
import { postJson, readJson, readSse } from './helpers';

const chat = { model: 'm', messages: [{ role: 'user', content: 'a b c d' }] };

describe('simulator: fault rules', () => {
  let sim: Simulator;
  beforeAll(async () => {
    sim = await startSimulator({ name: 'sim-faulty' });
  });
  afterAll(async () => {
    await sim.close();
  });
  beforeEach(() => {
    sim.setFaults([]);
    sim.clear();
  });

  it('answers a configured status, body and records the request', async () => {
    sim.setFaults([{ status: 503, body: '{"error":"busy"}' }]);
    const res = await postJson(`${sim.url}/v1/chat/completions`, chat);
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(await readJson(res)).toEqual({ error: 'busy' });
    expect(sim.requests).toHaveLength(1);
    expect(sim.requests[0].status).toBe(503);
  });

  it('applies a rule only to the matching epp-profile and path', async () => {
    sim.setFaults([{ match: { path: '/v1/chat/completions', profile: 'prefill' }, status: 500 }]);
    const prefill = await postJson(`${sim.url}/v1/chat/completions`, chat, { 'epp-profile': 'prefill' });
    const decode = await postJson(`${sim.url}/v1/chat/completions`, chat, { 'epp-profile': 'decode' });
    const otherPath = await postJson(`${sim.url}/v1/completions`, { prompt: 'x' }, { 'epp-profile': 'prefill' });
    expect(prefill.status).toBe(500);
    expect((await readJson(prefill)).error.code).toBe(500);
    expect(decode.status).toBe(200);
    expect(otherPath.status).toBe(200);
    await Promise.all([decode.text(), otherPath.text()]);
  });

  it('applies a rule with times only to the next N matching requests', async () => {
    sim.setFaults([{ status: 429, times: 2 }]);
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await postJson(`${sim.url}/v1/chat/completions`, chat);
      statuses.push(res.status);
      await res.text();
    }
    expect(statuses).toEqual([429, 429, 200]);
  });

  it('hangs until the client aborts, then marks the request closedEarly', async () => {
    sim.setFaults([{ hang: true }]);
    const controller = new AbortController();
    const pending = postJson(`${sim.url}/v1/chat/completions`, chat, { 'epp-profile': 'encode' }, controller.signal);
    const [recorded] = await sim.waitForRequests(1, 2000);
    expect(recorded.closedEarly).toBe(false);
    controller.abort();
    await expect(pending).rejects.toThrow();
    const closed = await sim.waitForClose((r) => r.headers['epp-profile'] === 'encode', 2000);
    expect(closed).toBe(recorded);
    expect(closed.closedEarly).toBe(true);
    expect(closed.status).toBeUndefined();
  });

  it('marks a streamed answer closedEarly when the client stops reading mid-stream', async () => {
    sim.setFaults([{ chunkDelayMs: 200 }]);
    const controller = new AbortController();
    const res = await postJson(`${sim.url}/v1/chat/completions`, { ...chat, stream: true }, {}, controller.signal);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    controller.abort();
    await expect(reader.read()).rejects.toThrow();
    const closed = await sim.waitForClose(() => true, 2000);
    expect(closed.status).toBe(200);
  });

  it('waitForClose times out when nothing was aborted', async () => {
    const res = await postJson(`${sim.url}/v1/chat/completions`, chat);
    await readJson(res);
    await expect(sim.waitForClose(() => true, 50)).rejects.toThrow(/timed out/);
  });

  it('resets the connection before answering', async () => {
    sim.setFaults([{ reset: true, times: 1 }]);
    await expect(postJson(`${sim.url}/v1/chat/completions`, chat)).rejects.toThrow();
    expect(sim.requests).toHaveLength(1);
    expect(sim.requests[0].closedEarly).toBe(false);
    const next = await postJson(`${sim.url}/v1/chat/completions`, chat);
    expect(next.status).toBe(200);
    await next.text();
  });

  it('resets the connection in the middle of a JSON body', async () => {
    sim.setFaults([{ resetMidBody: true }]);
    const res = await postJson(`${sim.url}/v1/chat/completions`, chat);
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow();
  });

  it('resets the connection after the first SSE frame', async () => {
    sim.setFaults([{ resetMidBody: true }]);
    const res = await postJson(`${sim.url}/v1/chat/completions`, { ...chat, stream: true });
    expect(res.status).toBe(200);
    await expect(readSse(res)).rejects.toThrow();
  });

  it('delays the headers by delayMs', async () => {
    sim.setFaults([{ delayMs: 150 }]);
    const controller = new AbortController();
    const pending = postJson(`${sim.url}/v1/chat/completions`, chat, {}, controller.signal);
    // Still waiting after the request was recorded: no status has been sent yet.
    const [recorded] = await sim.waitForRequests(1, 2000);
    expect(recorded.status).toBeUndefined();
    const res = await pending;
    expect(res.status).toBe(200);
    await readJson(res);
  });

  it('rejects invalid rules with a message naming the rule and key', () => {
    expect(() => sim.setFaults([{ status: 42 }])).toThrow(SimulatorConfigError);
    expect(() => sim.setFaults([{}, { times: 0 }])).toThrow(/fault rule 1: times/);
    expect(() => sim.setFaults([{ bogus: true } as never])).toThrow(/unknown key "bogus"/);
  });
});
