/**
 * Issue #14 item 1: epd-coordinator against what production runs, in the no-Kubernetes topology of
 * launch/epp-topology.ts: the real Envoy, the real llm-d EPP (file discovery, header-profile-handler),
 * llm-d-inference-sim as encode / prefill / decode / render, and the real llm-d-async with Redis.
 * The binaries come prebuilt from $PEERS_BIN; without them the suite is skipped and says why.
 *
 * Versions this suite was written and run against: llm-d-router main ebab6879 (`epp`,
 * `coordinator`), llm-d-inference-sim main eec055a3 (against llm-d-router v0.10.0), llm-d-async
 * main 5de949b, Envoy 1.40.0, redis-server 7.0.
 *
 * Every case checks what the peers saw: the simulators' `--log-http` blocks (one per leg, with the
 * request id) and Envoy's access log (`upstream=` is the EPP's pick), not only the client's status.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EPP_STACK_MODEL, freeEppStackPorts, startEppStack, type EppStack } from '../../launch/epp-stack';
import type { WorkerRole } from '../../launch/epp-topology';
import { at, sseData, TestClient } from '../../launch/client';
import { REFUSED_PORT } from '../../launch/ports';
import {
  eventually,
  peerBin,
  peersSkipReason,
  readAccessLog,
  simRequestsFor,
  simRequestsMatching,
  type SimHttpRequest,
} from '../support/peers';
import { uniqueImage } from '../support/unique-image';

const skip = peersSkipReason();
const suite = skip ? describe.skip : describe;
const MODEL = EPP_STACK_MODEL;
// Two prefill workers, so that removing one from the endpoints file has somewhere to move traffic.
const WORKERS: WorkerRole[] = ['encode', 'prefill', 'prefill', 'decode'];

let seq = 0;
const nextId = (what: string): string => `peers-${what}-${process.pid}-${++seq}`;

suite(`real peers: Envoy + llm-d EPP (file discovery) + llm-d-inference-sim + llm-d-async${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let dir: string;
  let stack: EppStack;
  let client: TestClient;
  let port: Record<string, number>;

  const simLogs = (role?: WorkerRole): string[] =>
    stack.endpoints.filter((e) => role === undefined || e.role === role).map((e) => stack.logs[e.name]!);
  /** The legs of request `id` that reached workers of `role`, as the simulators logged them. */
  const legs = (role: WorkerRole, id: string): Array<SimHttpRequest & { log: string }> => simRequestsFor(simLogs(role), id);
  const accessLines = (id: string) => readAccessLog(stack.accessLogPath).filter((l) => l['id'] === id);
  const waitAccess = (id: string, pred: (ls: Array<Record<string, string>>) => boolean, what: string) =>
    eventually(() => accessLines(id), pred, `${what} in ${stack.accessLogPath}`, 8000);
  const waitLegs = (role: WorkerRole, id: string, n: number) =>
    eventually(
      () => legs(role, id),
      (l) => l.length >= n,
      `${n} ${role} leg(s) of ${id}`,
      5000,
    );

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-peers-'));
    const ports = await freeEppStackPorts(WORKERS, true);
    stack = await startEppStack({
      dir,
      ports,
      eppBin: peerBin('epp'),
      simBin: peerBin('llm-d-inference-sim'),
      asyncBin: peerBin('llm-d-async'),
      // The endpoint-removal case edits the file while running.
      watchFile: true,
      conditionalDecode: true,
      readyTimeoutMs: 90_000,
    });
    port = Object.fromEntries(stack.endpoints.map((e) => [e.name, e.port]));
    client = new TestClient(stack.publicUrl);
  }, 180_000);

  afterAll(async () => {
    await client?.close();
    await stack?.stop();
    if (dir && !process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('is ready only through the gate: Envoy /ready 200 and llm_d_epp_ready_endpoints counting every endpoint; /metrics is 404 on the public port', async () => {
    const state = await stack.readiness();
    expect(state).toEqual({ ready: true, envoyReady: true, readyEndpoints: WORKERS.length, expectedEndpoints: WORKERS.length });
    const endpoints = readFileSync(stack.endpointsPath, 'utf8');
    for (const e of stack.endpoints) expect(endpoints).toContain(`llm-d.ai/role: ${e.role}`);

    const id = nextId('metrics');
    const res = await fetch(`${stack.publicUrl}/metrics`, { headers: { 'x-request-id': id } });
    expect(res.status).toBe(404);
    await res.arrayBuffer();
    // Envoy answered it itself: no worker was picked or reached.
    const [line] = await waitAccess(id, (ls) => ls.length === 1, 'the /metrics line');
    expect(line).toMatchObject({ listener: 'public', code: '404', upstream: '-' });
    for (const role of ['encode', 'prefill', 'decode'] as const) expect(legs(role, id)).toEqual([]);
  });

  it('GET /v1/models lists the served model as llm-d-inference-sim does: the async broker has no route models and passes it to decode', async () => {
    const res = await fetch(`${stack.publicUrl}/v1/models`, { headers: { 'x-request-id': nextId('models') } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: Array<{ id: string; owned_by: string }> };
    expect(body.data.map((m) => [m.id, m.owned_by])).toEqual([[MODEL, 'vllm']]);
  });

  it("text chat: prefill then decode, each picked by the EPP; the probe is the EPP's 412; kv_transfer_params carried from prefill to decode", async () => {
    const id = nextId('text');
    const res = await client.post(
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: 'hello' }] },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'message', 'content')).toBe('hello');
    expect(res.headers['x-inference-pod']).toBe('sim-decode-0');

    const [prefill] = await waitLegs('prefill', id, 1);
    expect(legs('prefill', id)).toHaveLength(1);
    expect(prefill!.uri).toBe('/v1/chat/completions');
    expect(prefill!.headers['epp-profile']).toBe('prefill');
    expect(at(prefill!.json, 'kv_transfer_params', 'do_remote_decode')).toBe(true);
    expect(at(prefill!.json, 'max_tokens')).toBe(1);
    expect(at(prefill!.json, 'stream')).toBe(false);

    // The conditional probe never reached the decode worker (the EPP answered 412): one decode leg.
    const decodes = await waitLegs('decode', id, 1);
    expect(decodes).toHaveLength(1);
    expect(decodes[0]!.headers['prefer']).toBeUndefined();
    expect(decodes[0]!.headers['epp-profile']).toBe('decode');
    expect(at(decodes[0]!.json, 'kv_transfer_params')).toMatchObject({
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_engine_id: 'DUMMY_ID',
    });
    expect(legs('encode', id)).toEqual([]);

    const lines = await waitAccess(id, (ls) => ls.some((l) => l['listener'] === 'public'), 'the public line');
    const gw = lines.filter((l) => l['listener'] === 'gateway');
    expect(gw.find((l) => l['epp-profile'] === 'decode')).toMatchObject({ code: '412', upstream: '-' });
    const prefillLine = gw.find((l) => l['epp-profile'] === 'prefill')!;
    expect(prefillLine).toMatchObject({ code: '200', cluster: 'original_destination_cluster' });
    expect(prefillLine['upstream']).toBe(
      `127.0.0.1:${port[prefill!.log === stack.logs['sim-prefill-0'] ? 'sim-prefill-0' : 'sim-prefill-1']}`,
    );
    const pub = lines.find((l) => l['listener'] === 'public')!;
    // One Envoy hop for decode: the public listener's own upstream is the decode worker.
    expect(pub).toMatchObject({
      code: '200',
      upstream: `127.0.0.1:${port['sim-decode-0']}`,
      'epp-profile': 'decode',
      path_taken: 'cascade',
    });
  });

  const imageBody = (images: string[], extra: Record<string, unknown>) => ({
    model: MODEL,
    messages: [
      {
        role: 'user',
        content: [
          ...images.map((url, i) => ({ type: 'image_url', image_url: { url }, uuid: `image-${i}` })),
          { type: 'text', text: 'Describe what you see.' },
        ],
      },
    ],
    ...extra,
  });

  /** The upstream e2e token-limit contract: decode keeps min/max tokens; prefill and encode get max 1, no min. */
  async function expectTokenLimits(id: string, encodePath: string, prefillPath: string): Promise<void> {
    const [encode] = await waitLegs('encode', id, 1);
    expect(encode!.uri).toBe(encodePath);
    const [prefill] = await waitLegs('prefill', id, 1);
    expect(prefill!.uri).toBe(prefillPath);
    for (const leg of [encode!, prefill!]) {
      const json = leg.json as Record<string, unknown>;
      const limits = prefillPath.includes('generate') ? (json['sampling_params'] as Record<string, unknown>) : json;
      expect(limits['max_tokens']).toBe(1);
      expect(limits).not.toHaveProperty('min_tokens');
    }
    const decodes = await waitLegs('decode', id, 1);
    expect(decodes).toHaveLength(1);
    expect(at(decodes[0]!.json, 'min_tokens')).toBe(3);
    expect(at(decodes[0]!.json, 'max_tokens')).toBe(5);
    // The generate wire format carries the transfer parameters under sampling_params.extra_args.
    const kv = prefillPath.includes('generate')
      ? at(decodes[0]!.json, 'sampling_params', 'extra_args', 'kv_transfer_params')
      : at(decodes[0]!.json, 'kv_transfer_params');
    expect(kv).toMatchObject({ do_remote_prefill: true, remote_engine_id: 'DUMMY_ID' });
  }

  it('min_tokens/max_tokens: kept on decode, capped on prefill and encode (OpenAI wire format)', async () => {
    const id = nextId('limits');
    const res = await client.post('/v1/chat/completions', imageBody([uniqueImage()], { min_tokens: 3, max_tokens: 5 }), {
      headers: { 'x-request-id': id },
    });
    expect(res.status).toBe(200);
    await expectTokenLimits(id, '/v1/chat/completions', '/v1/chat/completions');
    const [prefill] = legs('prefill', id);
    expect(Object.keys(at(prefill!.json, 'ec_transfer_params') as object)).toHaveLength(1);
  });

  it('one image, then two images: one encode leg per image (each picked by the EPP), their ec_transfer_params merged onto prefill', async () => {
    for (const images of [[uniqueImage()], [uniqueImage(), uniqueImage()]]) {
      const id = nextId(`images-${images.length}`);
      const res = await client.post('/v1/chat/completions', imageBody(images, { max_tokens: 20 }), { headers: { 'x-request-id': id } });
      expect(res.status).toBe(200);
      const encodes = await waitLegs('encode', id, images.length);
      expect(encodes).toHaveLength(images.length);
      for (const e of encodes) {
        expect(e.headers['epp-profile']).toBe('encode');
        const parts = at(e.json, 'messages', 0, 'content') as Array<{ type: string }>;
        expect(parts.filter((p) => p.type === 'image_url')).toHaveLength(1);
      }
      const [prefill] = await waitLegs('prefill', id, 1);
      expect(Object.keys(at(prefill!.json, 'ec_transfer_params') as object)).toHaveLength(images.length);
      const lines = await waitAccess(
        id,
        (ls) => ls.filter((l) => l['epp-profile'] === 'encode').length === images.length,
        'the encode lines',
      );
      for (const l of lines.filter((x) => x['epp-profile'] === 'encode'))
        expect(l).toMatchObject({ code: '200', upstream: `127.0.0.1:${port['sim-encode-0']}` });
    }
  });

  it('/inference/v1/generate, text and image: encode is skipped, prefill and decode get the generate body', async () => {
    const tokenIds = Array.from({ length: 20 }, (_, i) => 1000 + i);
    const withImage = {
      model: MODEL,
      token_ids: [1000, 32000, 32000, 32000, 1004],
      sampling_params: { max_tokens: 1 },
      features: {
        mm_hashes: { image: ['e2e-gen-hash-0'] },
        mm_placeholders: { image: [{ offset: 1, length: 3 }] },
        kwargs_data: { image: ['dGVuc29y'] },
      },
    };
    for (const body of [{ model: MODEL, token_ids: tokenIds, sampling_params: { max_tokens: 1 } }, withImage]) {
      const id = nextId('generate');
      const res = await client.post('/inference/v1/generate', body, { headers: { 'x-request-id': id } });
      expect(res.status).toBe(200);
      const [prefill] = await waitLegs('prefill', id, 1);
      expect(prefill!.uri).toBe('/inference/v1/generate');
      expect(at(prefill!.json, 'token_ids')).toEqual(body.token_ids);
      const [decode] = await waitLegs('decode', id, 1);
      expect(decode!.uri).toBe('/inference/v1/generate');
      expect(legs('encode', id)).toEqual([]);
      if ('features' in body) expect(at(prefill!.json, 'features', 'mm_hashes', 'image')).toEqual(['e2e-gen-hash-0']);
    }
  });

  it('streaming: SSE from decode through the public listener; prefill stayed non-streaming', async () => {
    const id = nextId('stream');
    const words = 'one two three four five six seven eight';
    const res = await client.post(
      '/v1/chat/completions',
      { model: MODEL, stream: true, messages: [{ role: 'user', content: words }] },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/event-stream/);
    const data = sseData(res.text);
    expect(data[data.length - 1]).toBe('[DONE]');
    const content = data
      .slice(0, -1)
      .map((d) => (at(JSON.parse(d), 'choices', 0, 'delta', 'content') as string | undefined) ?? '')
      .join('');
    expect(content).toBe(words);
    const [prefill] = await waitLegs('prefill', id, 1);
    expect(at(prefill!.json, 'stream')).toBe(false);
    const [decode] = await waitLegs('decode', id, 1);
    expect(at(decode!.json, 'stream')).toBe(true);
    await waitAccess(
      id,
      (ls) => ls.some((l) => l['listener'] === 'public' && l['code'] === '200' && l['upstream'] === `127.0.0.1:${port['sim-decode-0']}`),
      'the streamed public line',
    );
  });

  it("conditional decode: a long prompt misses (the EPP's 412, then the cascade); the same prompt again is a hit served by decode alone", async () => {
    // The EPP's prefix index hashes blocks of >= 64 estimated tokens, and is fed by decodes it routed.
    const prompt = Array.from(
      { length: 120 },
      (_, i) => `sentence ${i} of a long prompt that the decode worker will keep in its cache.`,
    ).join(' ');
    const body = { model: MODEL, messages: [{ role: 'user', content: prompt }], max_tokens: 8 };

    const miss = nextId('miss');
    const r1 = await client.post('/v1/chat/completions', body, { headers: { 'x-request-id': miss } });
    expect(r1.status).toBe(200);
    const missLines = await waitAccess(miss, (ls) => ls.some((l) => l['listener'] === 'public'), 'the miss');
    expect(missLines.find((l) => l['listener'] === 'gateway' && l['epp-profile'] === 'decode')).toMatchObject({ code: '412' });
    expect(missLines.find((l) => l['listener'] === 'public')).toMatchObject({ path_taken: 'cascade' });
    expect(await waitLegs('prefill', miss, 1)).toHaveLength(1);

    const hit = nextId('hit');
    const r2 = await client.post('/v1/chat/completions', body, { headers: { 'x-request-id': hit } });
    expect(r2.status).toBe(200);
    expect(r2.headers['x-inference-pod']).toBe('sim-decode-0');
    const hitLines = await waitAccess(hit, (ls) => ls.some((l) => l['listener'] === 'public'), 'the hit');
    expect(hitLines.find((l) => l['listener'] === 'gateway' && l['epp-profile'] === 'decode')).toMatchObject({
      code: '200',
      upstream: `127.0.0.1:${port['sim-decode-0']}`,
    });
    expect(hitLines.find((l) => l['listener'] === 'public')).toMatchObject({ path_taken: 'cache_hit' });
    // Served by decode alone: the probe itself, with Prefer, and no prefill or encode leg.
    const [decode] = await waitLegs('decode', hit, 1);
    expect(legs('decode', hit)).toHaveLength(1);
    expect(decode!.headers['prefer']).toBe('if-available');
    expect(at(decode!.json, 'kv_transfer_params')).toBeUndefined();
    expect(legs('prefill', hit)).toEqual([]);
  });

  it('async: enqueue, GET until the result, wait mode, DELETE, through the real llm-d-async and Redis', async () => {
    const job = nextId('job');
    // llm-d-async dispatches with its own request id (only allowlisted client headers ride along),
    // so the dispatched legs are found by their unique prompt.
    const prompt = `queued hello ${job}`;
    const chat = { model: MODEL, messages: [{ role: 'user', content: prompt }] };
    const enq = await client.post('/v1/chat/completions', chat, { headers: { 'x-ap-mode': 'enqueue', 'x-request-id': job } });
    expect(enq.status).toBe(202);
    expect(enq.json).toEqual({ id: job, status: 'pending' });
    expect(enq.headers['x-request-id']).toBe(job);

    let got = await fetch(`${stack.publicUrl}/v1/requests/${job}`);
    const deadline = Date.now() + 20_000;
    while (got.status === 202 && Date.now() < deadline) {
      await got.arrayBuffer();
      await new Promise((r) => setTimeout(r, 250));
      got = await fetch(`${stack.publicUrl}/v1/requests/${job}`);
    }
    expect(got.status).toBe(200);
    expect(at(await got.json(), 'choices', 0, 'message', 'content')).toBe(prompt);
    // llm-d-async dispatched it back through its own entry (the async listener), and the whole cascade ran for it.
    const byPrompt = (role: WorkerRole) => simRequestsMatching(simLogs(role), (r) => r.body.includes(prompt));
    const [dispatched] = await eventually(
      () => byPrompt('decode'),
      (l) => l.length >= 1,
      'the dispatched decode leg',
    );
    expect(at(dispatched!.json, 'kv_transfer_params', 'do_remote_prefill')).toBe(true);
    expect(byPrompt('prefill')).toHaveLength(1);
    // The fairness id llm-d-async stamped (the tenant: no X-Team is `default`) is trusted on its
    // entry and reached the worker; through the public listener it would have been removed.
    expect(dispatched!.headers['x-llm-d-inference-fairness-id']).toBe('default');
    const apId = dispatched!.headers['x-request-id']!;
    expect(apId).not.toBe(job);
    await waitAccess(
      apId,
      (ls) => ls.some((l) => l['listener'] === 'async' && l['code'] === '200' && l['path_taken'] === 'cascade'),
      "the AP's dispatch",
    );

    const held = `held hello ${job}`;
    const waited = await client.post(
      '/v1/chat/completions',
      { ...chat, messages: [{ role: 'user', content: held }] },
      {
        headers: { 'x-ap-mode': 'wait', 'x-request-id': nextId('wait') },
        timeoutMs: 30_000,
      },
    );
    expect(waited.status).toBe(200);
    expect(at(waited.json, 'choices', 0, 'message', 'content')).toBe(held);

    // DELETE of a queued request: 204, and it is never dispatched. GET says 202 until the AP pops it,
    // then CANCELLED, which the AP writes (Envoy carries 499 as 400; docs/async-broker.md).
    const gone = nextId('delete');
    const doomed = `deleted hello ${gone}`;
    const queued = await client.post(
      '/v1/chat/completions',
      { ...chat, messages: [{ role: 'user', content: doomed }] },
      { headers: { 'x-ap-mode': 'enqueue', 'x-request-id': gone } },
    );
    expect(queued.status).toBe(202);
    const del = await fetch(`${stack.publicUrl}/v1/requests/${gone}`, { method: 'DELETE' });
    expect(del.status).toBe(204);
    await del.arrayBuffer();
    let after = await fetch(`${stack.publicUrl}/v1/requests/${gone}`);
    const until = Date.now() + 20_000;
    while (after.status === 202 && Date.now() < until) {
      await after.arrayBuffer();
      await new Promise((r) => setTimeout(r, 250));
      after = await fetch(`${stack.publicUrl}/v1/requests/${gone}`);
    }
    expect(after.status).toBe(400);
    expect(at(await after.json(), 'error', 'code')).toBe('CANCELLED');
    for (const role of ['encode', 'prefill', 'decode'] as const)
      expect(simRequestsMatching(simLogs(role), (r) => r.body.includes(doomed))).toEqual([]);
  }, 60_000);

  it('generate wire format (use_openai_format: false): encode and prefill legs are /inference/v1/generate capped to 1 token, decode keeps the client limits', async () => {
    await stack.restartCoordinator({ useOpenaiFormat: false });
    try {
      const id = nextId('limits-generate');
      const res = await client.post('/v1/chat/completions', imageBody([uniqueImage()], { min_tokens: 3, max_tokens: 5 }), {
        headers: { 'x-request-id': id },
      });
      expect(res.status).toBe(200);
      await expectTokenLimits(id, '/inference/v1/generate', '/inference/v1/generate');
    } finally {
      await stack.restartCoordinator({ useOpenaiFormat: true });
    }
  }, 60_000);

  // Last: it changes the pool.
  it('the readiness gate stays false while an endpoint in the file cannot be scraped', async () => {
    const before = stack.endpoints;
    const reloads = () => (readFileSync(stack.logs['epp']!, 'utf8').match(/endpoints file changed, reloading/g) ?? []).length;
    const seen = reloads();
    // A worker that is listed but not up (nothing listens on its port).
    stack.writeEndpoints([...before, { name: 'sim-late-0', role: 'prefill', address: '127.0.0.1', port: REFUSED_PORT }]);
    await eventually(reloads, (n) => n > seen, 'the EPP to reload the endpoints file', 10_000);
    // Longer than the EPP's refresh (250 ms) and staleness (2 s) windows.
    await new Promise((r) => setTimeout(r, 2500));
    expect(await stack.readiness()).toEqual({
      ready: false,
      envoyReady: true,
      readyEndpoints: before.length,
      expectedEndpoints: before.length + 1,
    });
    stack.writeEndpoints(before);
    let state = await stack.readiness();
    const deadline = Date.now() + 15_000;
    while (!state.ready && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      state = await stack.readiness();
    }
    expect(state).toMatchObject({ ready: true, readyEndpoints: before.length });
  }, 60_000);

  it('an endpoint removed from the endpoints file while running: the gauge drops and the EPP stops picking it', async () => {
    const kept = stack.endpoints.filter((e) => e.name !== 'sim-prefill-1');
    expect(kept).toHaveLength(WORKERS.length - 1);
    stack.writeEndpoints(kept);
    let last = await stack.readiness();
    const deadline = Date.now() + 15_000;
    while (last.readyEndpoints !== kept.length && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      last = await stack.readiness();
    }
    expect(last).toMatchObject({ ready: true, readyEndpoints: kept.length });

    const ids = Array.from({ length: 6 }, () => nextId('removed'));
    for (const id of ids) {
      const res = await client.post(
        '/v1/chat/completions',
        { model: MODEL, messages: [{ role: 'user', content: `after removal ${id}` }] },
        { headers: { 'x-request-id': id } },
      );
      expect(res.status).toBe(200);
    }
    for (const id of ids) {
      const lines = await waitAccess(id, (ls) => ls.some((l) => l['epp-profile'] === 'prefill'), 'the prefill line');
      expect(lines.find((l) => l['epp-profile'] === 'prefill')).toMatchObject({
        code: '200',
        upstream: `127.0.0.1:${port['sim-prefill-0']}`,
      });
      expect(simRequestsFor([stack.logs['sim-prefill-1']!], id)).toEqual([]);
    }
  }, 60_000);
});

// `npm run stack -- --epp BIN` without --sim: the same topology with our own sim/ as the workers.
suite(`no-Kubernetes topology with our sim/ workers behind the real EPP${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let dir: string;
  let stack: EppStack;
  let client: TestClient;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-peers-oursim-'));
    stack = await startEppStack({
      dir,
      ports: await freeEppStackPorts(['encode', 'prefill', 'decode']),
      eppBin: peerBin('epp'),
      readyTimeoutMs: 90_000,
    });
    client = new TestClient(stack.publicUrl);
  }, 180_000);
  afterAll(async () => {
    await client?.close();
    await stack?.stop();
    if (dir && !process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('the EPP counts our workers as ready (they serve the vLLM gauges) and picks them for every leg', async () => {
    expect(await stack.readiness()).toMatchObject({ ready: true, readyEndpoints: 3 });
    const id = nextId('oursim');
    const res = await client.post(
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: 'hello from our sim' }] },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'message', 'content')).toBe('hello from our sim');
    expect(res.headers['x-inference-pod']).toBe('sim-decode-0');
    const port = Object.fromEntries(stack.endpoints.map((e) => [e.role, e.port]));
    const lines = await eventually(
      () => readAccessLog(stack.accessLogPath).filter((l) => l['id'] === id),
      (ls) => ls.length === 3,
      'three access-log lines',
      8000,
    );
    expect(lines.map((l) => [l['listener'], l['epp-profile'], l['code'], l['upstream']])).toEqual(
      expect.arrayContaining([
        ['gateway', 'decode', '412', '-'],
        ['gateway', 'prefill', '200', `127.0.0.1:${port['prefill']}`],
        ['public', 'decode', '200', `127.0.0.1:${port['decode']}`],
      ]),
    );
  });
});
