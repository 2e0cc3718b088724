/**
 * A passthrough quota slot belongs to the request only while the service works on it: once the
 * pipeline has decided (the decode request is Envoy's from then on), the slot is released, so the next
 * request of a tenant at its limit is reserved again rather than overflow until the window ends.
 */
import { build, sleep, useRedis } from './harness';
import { PipelineHandler } from '../../../../src/pipeline/handler';
import type { ForwardDecision, RespondDecision } from '../../../../src/pipeline/decision';
import type { Step } from '../../../../src/pipeline/step';
import { silentLogger } from '../../../../src/observability/logger';

const db = useRedis();

const decode: Step = {
  type: 'decode',
  execute: async (ctx) => {
    ctx.decode = { headers: { 'epp-profile': 'decode' } };
  },
};

test('a limited tenant sending requests one after another is reserved every time', async () => {
  const { step } = build({
    redis_url: db.server.url(),
    wakeup_mode: 'poll',
    routes: [{ model: 'test-model', queue: 'q', tier: 'interactive' }],
    objectives: { interactive: { reserved: 'interactive-reserved', overflow: 'interactive-overflow' } },
    quota: { limits: { 'limited-team': 1 }, window_seconds: 300 },
  });
  await step.start();
  const handler = new PipelineHandler({ steps: [step, decode], maxBodyBytes: 1 << 20, log: silentLogger() });
  const body = Buffer.from(JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'hi' }] }));
  const seen: string[] = [];
  for (let i = 0; i < 3; i++) {
    const ex = handler.begin({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'x-ap-mode': 'passthrough', 'x-team': 'limited-team' },
    })!;
    const d = (await ex.complete(body)) as ForwardDecision;
    seen.push(d.setHeaders['x-llm-d-inference-objective']!);
    // The release is a Redis call of its own; give it a moment before the next request.
    for (let t = 0; t < 20 && (await db.redis.get('quota:userid:limited-team')) !== '0'; t++) await sleep(25);
  }
  expect(seen).toEqual(['interactive-reserved', 'interactive-reserved', 'interactive-reserved']);
});

test("the step's own answers (a 202 enqueue, a 400 refusal) are path_taken step_response, never cache_hit", async () => {
  const { step } = build({
    redis_url: db.server.url(),
    wakeup_mode: 'poll',
    routes: [{ model: 'test-model', queue: 'q', tier: 'interactive' }],
  });
  await step.start();
  const handler = new PipelineHandler({ steps: [step, decode], maxBodyBytes: 1 << 20, log: silentLogger() });
  const body = Buffer.from(JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'hi' }] }));
  const answer = async (mode: string) => {
    const ex = handler.begin({ method: 'POST', path: '/v1/chat/completions', headers: { 'x-ap-mode': mode, 'x-team': 't' } })!;
    return (await ex.complete(body)) as RespondDecision;
  };
  const enqueued = await answer('enqueue');
  expect(enqueued).toMatchObject({ kind: 'respond', status: 202 });
  expect(enqueued.metadata).toMatchObject({ path_taken: 'step_response', status: 202 });
  const refused = await answer('sometimes');
  expect(refused).toMatchObject({ kind: 'respond', status: 400 });
  expect(refused.metadata).toMatchObject({ path_taken: 'step_response', status: 400 });
});
