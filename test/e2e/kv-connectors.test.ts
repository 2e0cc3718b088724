/**
 * Each KV connector's exact `kv_transfer_params` on the prefill and decode legs, as the workers
 * received them through the real Envoy, in both body modes. (kv-shared-storage: cascade.test.ts.)
 */
import type { RecordedRequest } from '../../sim/simulator';
import { at, TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';

// kv-sglang reads the bootstrap port from the environment once; pin the documented default.
delete process.env['SGLANG_BOOTSTRAP_PORT'];

const MODEL = 'sim-model';
const chat = { model: MODEL, messages: [{ role: 'user', content: 'transfer my cache' }], max_tokens: 3 };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const kvOf = (reqs: RecordedRequest[]): unknown => {
  expect(reqs).toHaveLength(1);
  return at(reqs[0]!.json, 'kv_transfer_params');
};

/** What the simulator's prefill answers carry (llm-d-inference-sim's DUMMY descriptor). */
const SIM_PREFILL_KV = {
  do_remote_decode: false,
  do_remote_prefill: true,
  remote_block_ids: ['DUMMY_ID'],
  remote_engine_id: 'DUMMY_ID',
  remote_host: 'DUMMY',
  remote_port: 1234,
  tp_size: 1,
};

describe.each(['full_duplex', 'buffered'] as const)('KV connectors through Envoy (%s)', (bodyMode) => {
  describe('kv-nixl', () => {
    let stack: Stack;
    let client: TestClient;
    beforeAll(async () => {
      stack = await startStack({ bodyMode, kvConnector: 'kv-nixl' });
      client = new TestClient(stack.publicUrl);
    });
    afterAll(async () => {
      await client?.close();
      await stack?.close();
    });
    beforeEach(() => stack.reset());

    it("prefill gets explicit nulls; decode gets the prefill answer's params", async () => {
      const res = await client.post('/v1/chat/completions', chat);
      expect(res.status).toBe(200);
      expect(kvOf(stack.sims.prefill.requests)).toEqual({
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      });
      expect(kvOf(stack.sims.decode.requests)).toEqual(SIM_PREFILL_KV);
    });

    it('decode = every key of the prefill answer, with the two flags flipped', async () => {
      const answered = {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: 'engine-7',
        remote_block_ids: [[1, 2], [3]],
        remote_request_id: 'prefill-req-9',
        remote_host: 'DUMMY-HOST',
        remote_port: 5557,
        tp_size: 2,
        something_new: { nested: true },
      };
      stack.sims.prefill.setFaults([
        {
          match: { profile: 'prefill' },
          status: 200,
          body: JSON.stringify({ id: 'x', object: 'chat.completion', choices: [], kv_transfer_params: answered }),
        },
      ]);
      const res = await client.post('/v1/chat/completions', chat);
      expect(res.status).toBe(200);
      expect(kvOf(stack.sims.decode.requests)).toEqual({ ...answered, do_remote_decode: false, do_remote_prefill: true });
    });
  });

  describe('kv-sglang', () => {
    let stack: Stack;
    let client: TestClient;
    beforeAll(async () => {
      stack = await startStack({ bodyMode, kvConnector: 'kv-sglang' });
      client = new TestClient(stack.publicUrl);
    });
    afterAll(async () => {
      await client?.close();
      await stack?.close();
    });
    beforeEach(() => stack.reset());

    it('prefill gets a fresh bootstrap room; decode gets the echoed bootstrap params with flipped flags', async () => {
      const res = await client.post('/v1/chat/completions', chat);
      expect(res.status).toBe(200);
      const prefillKv = kvOf(stack.sims.prefill.requests) as Record<string, unknown>;
      expect(prefillKv).toEqual({
        do_remote_decode: true,
        do_remote_prefill: false,
        bootstrap_port: 8998,
        bootstrap_room: expect.stringMatching(UUID),
      });
      expect(kvOf(stack.sims.decode.requests)).toEqual({
        ...SIM_PREFILL_KV,
        bootstrap_port: 8998,
        bootstrap_room: prefillKv['bootstrap_room'],
      });

      stack.reset();
      expect((await client.post('/v1/chat/completions', chat)).status).toBe(200);
      const second = kvOf(stack.sims.prefill.requests) as Record<string, unknown>;
      expect(second['bootstrap_room']).not.toBe(prefillKv['bootstrap_room']);
    });
  });
});
