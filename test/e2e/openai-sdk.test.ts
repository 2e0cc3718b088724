/**
 * The OpenAI SDK conformance suite (issue #19 item 1) against our simulators through the real Envoy:
 * the pipeline `npm run stack` runs (async broker on a real Redis, replace-media-urls, render,
 * conditional-decode, encode, prefill, decode). The cases are test/support/openai-cases.ts; the
 * same ones run against the real peers in test/peers/openai-sdk.test.ts.
 */
import { stackSteps } from '../../launch/local-stack';
import type { RecordedRequest } from '../../sim/simulator';
import { defineOpenAiConformanceCases, type ConformanceTarget, type WorkerLeg, type WorkerRole } from '../support/openai-cases';
import { RedisServer } from '../support/redis';
import { ROLES, stackConfigDoc, startStack, type Stack } from '../support/stack';
import { UPSTREAM_SECRET } from '../faults/support/expect';

const leg = (r: RecordedRequest): WorkerLeg => ({ path: r.path, headers: r.headers, json: r.json });

describe('OpenAI SDK against our simulators through Envoy', () => {
  let redis: RedisServer;
  let stack: Stack;

  beforeAll(async () => {
    redis = await RedisServer.start();
    stack = await startStack({
      // The decode simulator stands in for the EPP's conditional-decode gate, as on `npm run stack`.
      simulator: { honourPreferIfAvailable: true },
      // The connectors of the real-peer topology (launch/epp-stack.ts): the transfer params are on the wire.
      configDoc: (urls) => {
        const steps = () => stackSteps({ renderUrl: urls.render, redisUrl: redis.url(), conditionalDecode: true, multimodal: true });
        const doc = stackConfigDoc({ kvConnector: 'kv-nixl', steps }, urls);
        (doc['pipeline'] as Record<string, unknown>)['ec_connector'] = 'ec-nixl';
        return doc;
      },
    });
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
    await redis?.destroy();
  });

  const generationLegs = (role: WorkerRole, id: string): RecordedRequest[] =>
    // The probe the gate answered 412 is not a generation.
    stack.sims[role].requests.filter((r) => r.headers['x-request-id'] === id && r.status !== 412);

  const target = (): ConformanceTarget => ({
    publicUrl: stack.publicUrl,
    model: 'sim-model',
    legs: async (role, id, atLeast) => {
      const deadline = Date.now() + 5000;
      while (generationLegs(role, id).length < atLeast && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      return generationLegs(role, id).map(leg);
    },
    anyLegs: async (id) => ROLES.flatMap((role) => stack.sims[role].requests.filter((r) => r.headers['x-request-id'] === id).map(leg)),
    failPrefill: async (kind) => {
      const status = kind === 'rate-limit' ? 429 : 500;
      const body = JSON.stringify({ error: { message: `${UPSTREAM_SECRET} worker says ${status}`, type: 'x', code: status } });
      stack.sims.prefill.setFaults([{ match: { profile: 'prefill' }, status, body }]);
      return {
        upstreamText: UPSTREAM_SECRET,
        restore: async () => stack.sims.prefill.setFaults([]),
      };
    },
  });

  defineOpenAiConformanceCases(target);
});
