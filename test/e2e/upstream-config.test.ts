/**
 * A coordinator.yaml laid out as upstream's (render -> prefill -> decode, with the HTTP-server keys
 * upstream has) runs unchanged through the real Envoy. Only deployment addresses are pointed at this
 * machine's loopback: the listener, the gateway, render's address, and the metrics port.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { startStack, type Stack } from '../support/stack';
import { at, TestClient } from '../../launch/client';

const FIXTURE = join(__dirname, '../fixtures/upstream-coordinator.yaml');

let stack: Stack;
let client: TestClient;

beforeAll(async () => {
  stack = await startStack({
    configDoc: (urls) => {
      const doc = yaml.load(readFileSync(FIXTURE, 'utf8')) as {
        server: Record<string, unknown>;
        gateway: Record<string, unknown>;
        pipeline: { steps: Array<{ type: string; params?: Record<string, unknown> }> };
      };
      doc.server['listen_addr'] = '127.0.0.1:0';
      doc.server['metrics_addr'] = '127.0.0.1:0';
      doc.gateway['address'] = urls.gateway;
      doc.pipeline.steps.find((s) => s.type === 'render')!.params!['address'] = urls.render;
      return doc;
    },
  });
  client = new TestClient(stack.publicUrl);
});

afterAll(async () => {
  await client?.close();
  await stack?.close();
});

test('the upstream-shaped config loads with its own pipeline and answers a chat completion', async () => {
  expect(stack.config.pipeline.steps.map((s) => s.type)).toEqual(['render', 'prefill', 'decode']);
  expect(stack.config.warnings).toEqual(expect.arrayContaining([expect.stringMatching(/^server.read_timeout has no effect/)]));
  const res = await client.post('/v1/chat/completions', {
    model: 'any-model',
    messages: [{ role: 'user', content: 'from an upstream config' }],
  });
  expect(res.status).toBe(200);
  expect(at(res.json, 'choices', 0, 'message', 'content')).toBe('from an upstream config');
  expect(stack.sims.render.requests.map((r) => r.path)).toEqual(['/v1/chat/completions/render']);
  const prefill = stack.sims.prefill.requests[0]!;
  expect(prefill.headers['epp-profile']).toBe('prefill');
  expect(at(prefill.json, 'kv_transfer_params')).toEqual({ do_remote_decode: true, do_remote_prefill: false });
  const decode = stack.sims.decode.requests.at(-1)!;
  expect(decode.headers['epp-profile']).toBe('decode');
  expect(at(decode.json, 'kv_transfer_params')).toEqual({ do_remote_decode: false, do_remote_prefill: true });
});
