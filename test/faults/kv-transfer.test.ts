/**
 * kv-sglang end to end (issue #8, llm-d-router #2974). Why upstream's serial kv-sglang is broken,
 * from upstream's kv-sglang connector (`pkg/coordinator/connectors/kv`) and the simulator
 * (sim/transfer-params.ts echoes only the bootstrap fields a request carries):
 *  1. an SGLang prefill holds its answer until the decode peer connects to its bootstrap server, so
 *     "prefill, wait for the answer, then decode" waits until the gateway timeout;
 *  2. decode must know which prefill pod to connect to, but the serial flow never sends
 *     `bootstrap_host` (the coordinator does not know the pod: the EPP picks it);
 *  3. the room is a UUID string where SGLang uses an integer;
 *  4. the fields travel inside `kv_transfer_params`, where SGLang reads them top level.
 * The `prefill-decode` step fixes all four: it reserves a prefill pod through the EPP, pins the
 * prefill to it, and lets decode run concurrently with top-level bootstrap_host/port/room.
 *
 * Here an Envoy route stands in for the EPP's reserve-endpoint plugin (204 + the pod's address).
 */
import { at, TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';
import { withGatewayRoutes } from './support/custom-envoy';
import { startCustomStack, type CustomStack } from './support/custom-stack';
import { expectIdle, expectOpenAiError, UPSTREAM_SECRET } from './support/expect';

delete process.env['SGLANG_BOOTSTRAP_PORT'];

/** Grants every reserve with the one prefill pod; a request tagged `x-test-epp: busy` gets a 503 instead. */
const reserveRoute = (prefill: string): string =>
  [
    '              - match:',
    '                  prefix: "/"',
    '                  headers:',
    '                  - { name: prefer, string_match: { exact: reserve-endpoint } }',
    '                  - { name: x-test-epp, string_match: { exact: busy } }',
    `                direct_response: { status: 503, body: { inline_string: "${UPSTREAM_SECRET} epp internals" } }`,
    '              - match:',
    '                  prefix: "/"',
    '                  headers:',
    '                  - { name: epp-profile, string_match: { exact: prefill } }',
    '                  - { name: prefer, string_match: { exact: reserve-endpoint } }',
    '                direct_response: { status: 204 }',
    '                response_headers_to_add:',
    `                - header: { key: x-llm-d-reserved-host-port, value: "${prefill}" }`,
    '',
  ].join('\n');

const chat = { model: 'sim-model', messages: [{ role: 'user', content: 'sglang please' }], max_tokens: 4 };

describe('kv-sglang with the prefill-decode step, through Envoy', () => {
  let stack: CustomStack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startCustomStack({
      kvConnector: 'kv-sglang',
      gatewayTimeout: '2s',
      steps: ({ render }) => [{ type: 'render', params: { address: render } }, { type: 'prefill-decode' }],
      editEnvoy: (yaml, ctx) => withGatewayRoutes(yaml, reserveRoute(ctx.prefill[0]!)),
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it('prefill and decode carry the reserved pod, one integer room and no kv_transfer_params', async () => {
    const res = await client.post('/v1/chat/completions', chat, {
      headers: {
        'x-request-id': 'sglang-1',
        prefer: 'reserve-endpoint',
        'x-data-parallel-rank': '3',
        'x-llm-d-pin-host-port': '10.9.9.9:1',
      },
    });
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'message', 'content')).toBe('sglang please');

    const [prefill] = await stack.prefill[0]!.waitForRequests(1);
    const decode = stack.decode.requests[0]!;
    const host = stack.prefill[0]!.url.replace('http://', '');
    expect(prefill!.headers).toMatchObject({ 'epp-profile': 'prefill', 'x-request-id': 'sglang-1-prefill', 'x-llm-d-pin-host-port': host });
    expect(prefill!.json).toMatchObject({ bootstrap_host: '127.0.0.1', bootstrap_port: 8998, max_tokens: 1, stream: false });
    const room = at(prefill!.json, 'bootstrap_room');
    expect(Number.isSafeInteger(room)).toBe(true);

    expect(decode.headers['epp-profile']).toBe('decode');
    expect(decode.headers['x-request-id']).toBe('sglang-1');
    expect(decode.json).toMatchObject({ bootstrap_host: '127.0.0.1', bootstrap_port: 8998, bootstrap_room: room, max_tokens: 4 });
    for (const leg of [prefill!, decode]) {
      expect(leg.json).not.toHaveProperty('kv_transfer_params');
      expect(leg.headers).not.toHaveProperty('prefer');
      expect(leg.headers).not.toHaveProperty('x-data-parallel-rank');
    }
    expect(decode.headers).not.toHaveProperty('x-llm-d-pin-host-port');
    await expectIdle(stack.service);
  });

  it('decode is not held up by a prefill that answers only later (as SGLang does)', async () => {
    stack.prefill[0]!.setFaults([{ hang: true }]);
    const res = await client.post('/v1/chat/completions', chat);
    expect(res.status).toBe(200);
    expect(stack.decode.requests).toHaveLength(1);
    // The two legs leave together and race: the decode answer may reach the client before the
    // prefill reaches its worker, so wait for it (and keep it out of the next test).
    await stack.prefill[0]!.waitForRequests(1);
    expect(stack.prefill[0]!.requests).toHaveLength(1);
  });

  it('a reserve the EPP refuses is answered by us (502, no upstream text) and nothing reaches a worker', async () => {
    const res = await client.post('/v1/chat/completions', chat, { headers: { 'x-test-epp': 'busy' } });
    expectOpenAiError(res, 502);
    expect(stack.prefill[0]!.requests).toHaveLength(0);
    expect(stack.decode.requests).toHaveLength(0);
    await expectIdle(stack.service);
  });
});

describe('kv-sglang with the serial prefill -> decode steps (upstream baseline)', () => {
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startStack({ kvConnector: 'kv-sglang', gatewayTimeout: '1s' });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });

  it('cannot complete against a prefill that waits for its decode peer: 502 after the gateway timeout', async () => {
    stack.sims.prefill.setFaults([{ hang: true }]);
    const res = await client.post('/v1/chat/completions', chat);
    expectOpenAiError(res, 502);
    expect(stack.sims.decode.requests).toHaveLength(0);
    // And what it does send names no pod and uses a string room inside kv_transfer_params.
    const kv = at(stack.sims.prefill.requests[0]!.json, 'kv_transfer_params') as Record<string, unknown>;
    expect(kv).not.toHaveProperty('bootstrap_host');
    expect(typeof kv['bootstrap_room']).toBe('string');
  });
});

describe('kv-nixl with dp_size 4: x-data-parallel-rank on both legs, through Envoy', () => {
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startStack({
      kvConnector: 'kv-nixl',
      steps: ({ render }) => [
        { type: 'render', params: { address: render } },
        { type: 'prefill', params: { dp_size: 4 } },
        { type: 'decode' },
      ],
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it('both legs get the request-id hash rank; a client value is replaced', async () => {
    // BLAKE2s-256("req-1")[0..8] big-endian mod 4 = 1 (computed with Python's hashlib).
    const res = await client.post('/v1/chat/completions', chat, { headers: { 'x-request-id': 'req-1', 'x-data-parallel-rank': '3' } });
    expect(res.status).toBe(200);
    expect(stack.sims.prefill.requests[0]!.headers['x-data-parallel-rank']).toBe('1');
    expect(stack.sims.decode.requests[0]!.headers['x-data-parallel-rank']).toBe('1');
  });

  it('decode follows the remote_dp_rank the prefill worker reports', async () => {
    stack.sims.prefill.setFaults([
      { status: 200, body: JSON.stringify({ choices: [], kv_transfer_params: { remote_host: 'h', remote_dp_rank: 2 } }) },
    ]);
    const res = await client.post('/v1/chat/completions', chat, { headers: { 'x-request-id': 'req-1' } });
    expect(res.status).toBe(200);
    expect(stack.sims.prefill.requests[0]!.headers['x-data-parallel-rank']).toBe('1');
    expect(stack.sims.decode.requests[0]!.headers['x-data-parallel-rank']).toBe('2');
    expect(at(stack.sims.decode.requests[0]!.json, 'kv_transfer_params')).toEqual({
      remote_host: 'h',
      remote_dp_rank: 2,
      do_remote_decode: false,
      do_remote_prefill: true,
    });
  });
});
