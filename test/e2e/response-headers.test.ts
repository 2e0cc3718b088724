/**
 * Cross-phase response headers through the real Envoy (issue #15 item 3): upstream's
 * `pipeline.forward_response_headers` (PR #2301) and `x-peer-topology` (PRs #2319, #2365).
 * What Envoy does for us: the decode answer streams to the client through Envoy, never through the
 * service, so its headers pass untouched except the internal ones Envoy's header mutation strips.
 */
import { TestClient } from '../../launch/client';
import { stackConfigDoc, startStack, type Stack } from '../support/stack';

const MODEL = 'sim-model';
const chat = { model: MODEL, messages: [{ role: 'user', content: 'relay headers please' }], max_tokens: 5 };

describe('forward_response_headers and x-peer-topology through Envoy', () => {
  let stack: Stack;
  let client: TestClient;

  beforeAll(async () => {
    stack = await startStack({
      configDoc: (urls) => {
        const doc = stackConfigDoc({}, urls);
        (doc['pipeline'] as Record<string, unknown>)['forward_response_headers'] = ['X-LLM-D-Disagg-Revision ', 'x-disagg-slice'];
        return doc;
      },
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it("a listed header from render reaches prefill; prefill's own replaces it for decode, with its topology", async () => {
    stack.sims.render.setFaults([{ headers: { 'x-llm-d-disagg-revision': 'rev-render', 'x-disagg-slice': 'slice-1' } }]);
    stack.sims.prefill.setFaults([
      { match: { profile: 'prefill' }, headers: { 'x-llm-d-disagg-revision': 'rev-prefill', 'x-peer-topology': 'host=node12,zone=z1' } },
    ]);
    const res = await client.post('/v1/chat/completions', chat, {
      headers: { 'x-llm-d-disagg-revision': 'client-rev', 'x-peer-topology': 'host=evil', 'x-disagg-slice': 'client-slice' },
    });
    expect(res.status).toBe(200);
    const prefill = stack.sims.prefill.requests[0]!;
    expect(prefill.headers['x-llm-d-disagg-revision']).toBe('rev-render');
    expect(prefill.headers['x-disagg-slice']).toBe('slice-1');
    expect(prefill.headers['x-peer-topology']).toBeUndefined();
    const decode = stack.sims.decode.requests[0]!;
    expect(decode.headers['x-llm-d-disagg-revision']).toBe('rev-prefill');
    expect(decode.headers['x-disagg-slice']).toBe('slice-1');
    expect(decode.headers['x-peer-topology']).toBe('host=node12,zone=z1');
  });

  it('client values of listed headers and of the topology never reach a worker when no phase answered one', async () => {
    const res = await client.post('/v1/chat/completions', chat, {
      headers: { 'x-llm-d-disagg-revision': 'client-rev', 'x-peer-topology': 'host=evil', 'x-disagg-slice': 'client-slice' },
    });
    expect(res.status).toBe(200);
    for (const leg of [...stack.sims.render.requests, ...stack.sims.prefill.requests, ...stack.sims.decode.requests]) {
      expect(leg.headers['x-llm-d-disagg-revision']).toBeUndefined();
      expect(leg.headers['x-disagg-slice']).toBeUndefined();
      expect(leg.headers['x-peer-topology']).toBeUndefined();
    }
  });

  it("the decode answer's internal headers are stripped by Envoy; its other headers pass untouched", async () => {
    stack.sims.decode.setFaults([
      {
        match: { profile: 'decode' },
        headers: { 'x-peer-topology': 'host=node3', 'epp-profile': 'decode', 'x-llm-d-disagg-revision': 'rev-decode' },
      },
    ]);
    const res = await client.post('/v1/chat/completions', chat);
    expect(res.status).toBe(200);
    expect(res.headers['x-peer-topology']).toBeUndefined();
    expect(res.headers['epp-profile']).toBeUndefined();
    expect(res.headers['x-llm-d-disagg-revision']).toBe('rev-decode');
    expect(res.headers['x-inference-pod']).toBe('sim-decode-0');
  });
});
