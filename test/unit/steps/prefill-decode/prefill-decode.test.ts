/**
 * `prefill-decode` (reference §12.4) against a loopback gateway that plays the EPP: a reserve
 * answer, then the pinned prefill, while the step hands the decode request to Envoy.
 */
import { CancelledError, UpstreamError, classify } from '../../../../src/pipeline/errors';
import type { StepParams } from '../../../../src/pipeline/step';
import { createPrefillDecodeStep, parseReservedEndpoint } from '../../../../src/steps/prefill-decode';
import { FakeUpstream, makeCtx, TestDeps, type SeenRequest } from '../fake-upstream';

const gateway = new FakeUpstream();
let td: TestDeps;

beforeAll(async () => {
  await gateway.start();
  td = new TestDeps(gateway.url, 2000);
});
afterAll(async () => {
  await td.close();
  await gateway.stop();
});
beforeEach(() => {
  gateway.reset();
  delete process.env['SGLANG_BOOTSTRAP_PORT'];
});

function step(params: StepParams = {}) {
  return createPrefillDecodeStep({ use_openai_format: true, kv_connector: 'kv-sglang', ...params }, td.deps);
}

/** An EPP with the reserve-endpoint plugin: 204 + the pod for a reserve, 200 for the pinned prefill. */
function epp(
  reserve: { status?: number; endpoint?: string | null } = {},
): (req: SeenRequest) => { status: number; headers?: Record<string, string>; body?: unknown } {
  return (req) => {
    if (req.headers['prefer'] === 'reserve-endpoint') {
      const headers: Record<string, string> = {};
      const endpoint = reserve.endpoint === undefined ? '10.0.3.7:8000' : reserve.endpoint;
      if (endpoint !== null) headers['x-llm-d-reserved-host-port'] = endpoint;
      return { status: reserve.status ?? 204, headers, body: '' };
    }
    return { status: 200, body: { choices: [] } };
  };
}

async function waitForLegs(n: number): Promise<void> {
  for (let i = 0; i < 200 && gateway.seen.length < n; i++) await new Promise((r) => setTimeout(r, 5));
}

const chat = () => ({
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 64,
  stream: true,
  data_parallel_rank: 3,
  routed_dp_rank: 1,
  kv_transfer_params: { spoofed: true },
});

describe('prefill-decode', () => {
  it('reserves, pins the prefill and shapes the decode request with the same bootstrap fields', async () => {
    gateway.respond = epp();
    const ctx = makeCtx({
      requestId: 'req-1',
      body: chat(),
      tokenIds: [1, 2, 3],
      headers: { authorization: 'Bearer t', prefer: 'reserve-endpoint', 'x-data-parallel-rank': '7', 'x-llm-d-pin-host-port': '6.6.6.6:1' },
    });
    await step().execute(ctx);
    await waitForLegs(2);
    const [reserve, prefill] = gateway.seen;

    expect(reserve!.path).toBe('/v1/chat/completions');
    expect(reserve!.headers).toMatchObject({
      'x-request-id': 'req-1-reserve',
      'epp-profile': 'prefill',
      prefer: 'reserve-endpoint',
      authorization: 'Bearer t',
    });
    expect(reserve!.headers).not.toHaveProperty('x-data-parallel-rank');
    expect(reserve!.headers).not.toHaveProperty('x-llm-d-pin-host-port');
    expect(reserve!.json).toMatchObject({ max_tokens: 1, stream: false });
    expect(reserve!.json).not.toHaveProperty('bootstrap_room');

    expect(prefill!.headers).toMatchObject({
      'x-request-id': 'req-1-prefill',
      'epp-profile': 'prefill',
      'x-llm-d-pin-host-port': '10.0.3.7:8000',
      authorization: 'Bearer t',
    });
    expect(prefill!.headers).not.toHaveProperty('prefer');
    expect(prefill!.headers).not.toHaveProperty('x-data-parallel-rank');
    const room = prefill!.json.bootstrap_room as number;
    expect(Number.isSafeInteger(room)).toBe(true);
    expect(prefill!.json).toMatchObject({ bootstrap_host: '10.0.3.7', bootstrap_port: 8998, max_tokens: 1, stream: false });
    for (const field of ['kv_transfer_params', 'data_parallel_rank', 'routed_dp_rank']) expect(prefill!.json).not.toHaveProperty(field);

    // Decode: the client body Envoy forwards.
    expect(ctx.body).toMatchObject({
      bootstrap_host: '10.0.3.7',
      bootstrap_port: 8998,
      bootstrap_room: room,
      max_tokens: 64,
      stream: true,
    });
    expect(ctx.body['tokens']).toEqual({ token_ids: [1, 2, 3] });
    for (const field of ['kv_transfer_params', 'data_parallel_rank', 'routed_dp_rank']) expect(ctx.body).not.toHaveProperty(field);
    expect(ctx.decode).toEqual({
      headers: { 'epp-profile': 'decode', 'x-request-id': 'req-1', 'content-type': 'application/json' },
      removeHeaders: ['prefer', 'x-llm-d-pin-host-port', 'x-data-parallel-rank'],
    });
  });

  it('chat with use_openai_format false: reserve and prefill on the generate path, decode keeps the client path', async () => {
    gateway.respond = epp();
    const ctx = makeCtx({ body: chat(), tokenIds: [1, 2, 3] });
    await step({ use_openai_format: false }).execute(ctx);
    await waitForLegs(2);
    expect(gateway.seen.map((r) => r.path)).toEqual(['/inference/v1/generate', '/inference/v1/generate']);
    expect(gateway.seen[1]!.json).toMatchObject({ token_ids: [1, 2, 3], sampling_params: { max_tokens: 1 }, bootstrap_host: '10.0.3.7' });
    expect(gateway.seen[1]!.json.sampling_params).not.toHaveProperty('extra_args');
    expect(ctx.decode?.headers['epp-profile']).toBe('decode');
  });

  it('completions: the prefill body carries the token prompt and no kv params', async () => {
    gateway.respond = epp();
    const ctx = makeCtx({ path: '/v1/completions', body: { model: 'm', prompt: [5, 6], max_tokens: 9 }, tokenIds: [5, 6] });
    await step().execute(ctx);
    await waitForLegs(2);
    expect(gateway.seen[1]!.json).toMatchObject({ prompt: [5, 6], max_tokens: 1, bootstrap_host: '10.0.3.7' });
    expect(gateway.seen[1]!.json).not.toHaveProperty('kv_transfer_params');
    expect(ctx.body).toMatchObject({ prompt: [5, 6], max_tokens: 9, bootstrap_host: '10.0.3.7' });
  });

  it("a client ec_transfer_params never reaches either leg; the coordinator's EC params reach prefill only", async () => {
    gateway.respond = epp();
    const spoof = { h1: { peer_host: '6.6.6.6', peer_port: 1 } };
    const body = {
      ...chat(),
      ec_transfer_params: spoof,
      sampling_params: { extra_args: { ec_transfer_params: spoof, kv_transfer_params: { x: 1 } } },
    };
    const ctx = makeCtx({ body, tokenIds: [1, 2, 3], ecTransferParams: [{ h1: { peer_host: 'encoder', peer_port: 5501 } }] });
    await step({ ec_connector: 'ec-nixl' }).execute(ctx);
    await waitForLegs(2);
    const prefill = gateway.seen[1]!.json;
    expect(prefill.ec_transfer_params).toEqual({ h1: { peer_host: 'encoder', peer_port: 5501 } });
    expect(JSON.stringify(prefill)).not.toContain('6.6.6.6');
    expect(JSON.stringify(ctx.body)).not.toContain('_transfer_params');
    expect(ctx.body['sampling_params']).toEqual({ extra_args: {} });
  });

  it('an IPv6 reserved endpoint gives the bare host', async () => {
    gateway.respond = epp({ endpoint: '[fd00::7]:8000' });
    const ctx = makeCtx({ body: chat() });
    await step().execute(ctx);
    await waitForLegs(2);
    expect(ctx.body['bootstrap_host']).toBe('fd00::7');
    expect(gateway.seen[1]!.headers['x-llm-d-pin-host-port']).toBe('[fd00::7]:8000');
  });

  it.each([
    ['500', { status: 500 }, 502, 'upstream_5xx'],
    ['503', { status: 503 }, 502, 'upstream_5xx'],
    ['412 with the header', { status: 412 }, 412, 'upstream_4xx'],
    ['429', { status: 429 }, 429, 'upstream_4xx'],
    ['204 without the header', { endpoint: null }, 502, 'upstream_invalid'],
    ['an endpoint without a port', { endpoint: '10.0.3.7' }, 502, 'upstream_invalid'],
    ['200 (an EPP that forwarded the ask)', { status: 200 }, 502, 'upstream_invalid'],
  ])('reserve failure (%s): %p -> %d %s, nothing else sent, nothing forwarded', async (_name, reserve, status, errorClass) => {
    gateway.respond = epp(reserve);
    const ctx = makeCtx({ body: chat() });
    let caught: unknown;
    try {
      await step().execute(ctx);
    } catch (err) {
      caught = err;
    }
    expect(classify(caught, 'rid').status).toBe(status);
    expect(classify(caught, 'rid').errorClass).toBe(errorClass);
    await new Promise((r) => setTimeout(r, 20));
    expect(gateway.seen).toHaveLength(1);
    expect(ctx.decode).toBeNull();
    if (status !== 502) expect(caught).toBeInstanceOf(UpstreamError);
  });

  it('does not wait for the prefill answer (SGLang holds it until decode connects)', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    gateway.respond = async (req) => {
      if (req.headers['prefer'] === 'reserve-endpoint')
        return { status: 204, headers: { 'x-llm-d-reserved-host-port': '10.0.3.7:8000' }, body: '' };
      await held;
      return { status: 200, body: {} };
    };
    const ctx = makeCtx({ body: chat() });
    await step().execute(ctx);
    expect(ctx.decode).not.toBeNull();
    await waitForLegs(2);
    expect(gateway.seen).toHaveLength(2);
    release();
  });

  it('a client gone before the decode request was released cancels the prefill', async () => {
    const controller = new AbortController();
    gateway.respond = epp();
    const ctx = makeCtx({ body: chat(), signal: controller.signal });
    controller.abort();
    await expect(step().execute(ctx)).rejects.toBeInstanceOf(CancelledError);
    expect(gateway.seen).toHaveLength(0);
  });

  it('rejects the serial connectors at start-up, as upstream', () => {
    expect(() => step({ kv_connector: 'kv-nixl' })).toThrow(/use the "prefill" and "decode" steps/);
    expect(() => step({ kv_connector: 'kv-sglang', kv_connector_params: { bootstrap_port: 0 } })).toThrow(/kv_connector_params/);
  });

  it('a configured bootstrap port reaches both bodies', async () => {
    gateway.respond = epp();
    const ctx = makeCtx({ body: chat() });
    await step({ kv_connector_params: { bootstrap_port: 9123 } }).execute(ctx);
    await waitForLegs(2);
    expect(gateway.seen[1]!.json.bootstrap_port).toBe(9123);
    expect(ctx.body['bootstrap_port']).toBe(9123);
  });
});

describe('parseReservedEndpoint', () => {
  it.each([
    ['10.0.3.7:8000', { host: '10.0.3.7', port: 8000 }],
    ['[fd00::7]:8000', { host: 'fd00::7', port: 8000 }],
    ['pod-a.ns.svc:1', { host: 'pod-a.ns.svc', port: 1 }],
  ])('%s', (value, expected) => expect(parseReservedEndpoint(value)).toEqual(expected));
  it.each([
    '10.0.3.7',
    '10.0.3.7:',
    ':8000',
    '10.0.3.7:0',
    '10.0.3.7:65536',
    'fd00::7:8000',
    '[fd00::7]8000',
    'a b:80',
    'x'.repeat(400) + ':1',
    'h:80\r\nx: y',
  ])('refuses %j', (value) => expect(parseReservedEndpoint(value)).toBeNull());
});
