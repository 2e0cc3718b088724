/**
 * Issue #12: the quick-start stack runs the full E/P/D pipeline, and its printed image request
 * (the README's) answers 200 with an encode leg; a pipeline that cannot serve images says so, at
 * start-up and with a 400, instead of a 502 "internal error". Issue #19: `models.list` through the
 * stack lists the served model.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { REPO_ROOT } from '../../launch/envoy-bootstrap';
import { STACK_IMAGE_REQUEST, stackSteps } from '../../launch/local-stack';
import { TestClient } from '../../launch/client';
import { RedisServer } from '../support/redis';
import { startStack, ROLES, type Stack } from '../support/stack';

const image = JSON.parse(STACK_IMAGE_REQUEST) as Record<string, unknown>;

describe("the stack's pipeline (npm run stack)", () => {
  let redis: RedisServer;
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    redis = await RedisServer.start();
    stack = await startStack({
      simulator: { honourPreferIfAvailable: true },
      steps: ({ render }) => stackSteps({ renderUrl: render, redisUrl: redis.url(), conditionalDecode: true, multimodal: true }),
    });
    client = new TestClient(stack.publicUrl);
  }, 120_000);
  afterAll(async () => {
    await client?.close();
    await stack?.close();
    await redis?.destroy();
  });

  test('the README shows the request the stack prints', () => {
    expect(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8')).toContain(`-d '${STACK_IMAGE_REQUEST}'`);
  });

  test('the image request answers 200 through replace-media-urls, render, encode, prefill and decode', async () => {
    const id = `stack-image-${process.pid}`;
    const res = await client.post('/v1/chat/completions', image, { headers: { 'x-request-id': id } });
    expect(res.status).toBe(200);
    expect(stack.sims.encode.requests.filter((r) => r.headers['x-request-id'] === id)).toHaveLength(1);
    const encodeLeg = await stack.accessLog.waitFor((e) => e.listener === 'gateway' && e.x_request_id === id && e.epp_profile === 'encode');
    expect(encodeLeg.response_code).toBe(200);
    const pub = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
    expect(pub).toMatchObject({ response_code: 200, path_taken: 'cascade', mm_entries: 1 });
  });

  test("models.list shows the served model: the async broker has no route models, so decode's list passes through", async () => {
    stack.reset();
    const openai = new OpenAI({ baseURL: `${stack.publicUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const models = [];
    for await (const m of openai.models.list()) models.push(m);
    expect(models.map((m) => [m.id, m.owned_by])).toEqual([['sim-model', 'epd-sim']]);
    expect(stack.sims.decode.requests.map((r) => [r.method, r.path, r.headers['epp-profile']])).toEqual([['GET', '/v1/models', 'decode']]);
  });
});

describe('a pipeline without replace-media-urls (render -> prefill -> decode)', () => {
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startStack();
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });

  test('start-up says once that images are refused, naming the step', () => {
    const log = readFileSync(join(stack.dir, 'service.log'), 'utf8');
    const lines = log.split('\n').filter((l) => l.includes('chat requests with images get 400'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('no \\"replace-media-urls\\" step');
  });

  test('an image request gets a 400 that says why, and no worker sees it', async () => {
    const res = await client.post('/v1/chat/completions', image, { headers: { 'x-request-id': 'no-media-1' } });
    expect(res.status).toBe(400);
    expect(res.json).toMatchObject({
      error: {
        type: 'invalid_request_error',
        message: 'this deployment does not accept images: its pipeline has no "replace-media-urls" step (request_id: no-media-1)',
      },
    });
    for (const r of ROLES) expect(stack.sims[r].requests).toHaveLength(0);
  });

  test('a text request is served as before', async () => {
    const res = await client.post('/v1/chat/completions', { model: 'sim-model', messages: [{ role: 'user', content: 'text only' }] });
    expect(res.status).toBe(200);
  });
});
