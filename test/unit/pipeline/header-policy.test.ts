/**
 * The header policy (issue #12): a client sets none of the headers the gateway, EPP or workers act
 * on unless the operator trusts it, and every header the service passes on is visible ASCII.
 */
import {
  GATEWAY_HEADERS,
  headerPolicy,
  HeaderPolicyError,
  screenHeaders,
  DEFAULT_HEADER_POLICY,
} from '../../../src/pipeline/header-policy';
import { PipelineHandler } from '../../../src/pipeline/handler';
import type { ForwardDecision } from '../../../src/pipeline/decision';
import type { RequestContext } from '../../../src/pipeline/context';
import type { Step } from '../../../src/pipeline/step';
import { silentLogger } from '../../../src/observability/logger';
import { parseConfig } from '../../../src/config/config';
import { startService } from '../../../src/service';
import { ConfigError } from '../../../src/config/errors';

/** A chat body with the shape the pipeline checks before any step. */
const CHAT_BODY = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
/** Every gateway header, with a value a hostile client would send. */
const SPOOFED: Record<string, string> = Object.fromEntries([...GATEWAY_HEADERS.keys()].map((h) => [h, `client-${h}`]));

describe('screenHeaders', () => {
  test('by default every gateway header is removed, and nothing else', () => {
    const s = screenHeaders({ ...SPOOFED, authorization: 'Bearer t', 'x-team': 'acme' }, DEFAULT_HEADER_POLICY);
    expect(s.headers).toEqual({ authorization: 'Bearer t', 'x-team': 'acme' });
    expect([...s.removed].sort()).toEqual([...GATEWAY_HEADERS.keys()].sort());
    expect(s.invalid).toBeUndefined();
  });

  test('the classification names the current and deprecated names the EPP reads', () => {
    for (const h of [
      'x-llm-d-inference-fairness-id',
      'x-gateway-inference-fairness-id',
      'x-llm-d-inference-objective',
      'x-gateway-inference-objective',
      'x-gateway-priority',
      'x-llm-d-slo-ttft-ms',
      'x-slo-ttft-ms',
      'x-llm-d-slo-tpot-ms',
      'x-slo-tpot-ms',
      'x-gateway-model-name',
    ]) {
      expect(GATEWAY_HEADERS.get(h)).toBe('tenancy');
    }
    for (const h of ['epp-profile', 'x-gateway-destination-endpoint', 'x-llm-d-pin-host-port', 'x-prefiller-host-port', 'prefer'])
      expect(GATEWAY_HEADERS.get(h)).toBe('routing');
    for (const h of ['x-data-parallel-rank', 'x-peer-topology']) expect(GATEWAY_HEADERS.get(h)).toBe('transfer');
  });

  test('a trusted header stays; the others still go', () => {
    const s = screenHeaders({ 'x-llm-d-slo-ttft-ms': '800', 'x-llm-d-inference-fairness-id': 'me' }, headerPolicy(['X-LLM-D-SLO-TTFT-MS']));
    expect(s.headers).toEqual({ 'x-llm-d-slo-ttft-ms': '800' });
    expect(s.removed).toEqual(['x-llm-d-inference-fairness-id']);
  });

  test('a surviving header with a byte outside visible ASCII is named; a removed one never counts', () => {
    const latin1 = '\xff'.repeat(100);
    expect(screenHeaders({ 'x-gateway-inference-fairness-id': latin1 }, DEFAULT_HEADER_POLICY).invalid).toBeUndefined();
    expect(screenHeaders({ 'x-gateway-inference-fairness-id': latin1 }, headerPolicy(['x-gateway-inference-fairness-id'])).invalid).toBe(
      'x-gateway-inference-fairness-id',
    );
    expect(screenHeaders({ 'user-agent': 'caf\xc3\xa9' }, DEFAULT_HEADER_POLICY).invalid).toBe('user-agent');
    expect(screenHeaders({ 'x-a': 'a\x01b' }, DEFAULT_HEADER_POLICY).invalid).toBe('x-a');
    expect(screenHeaders({ 'x-a': 'tab\there ~!' }, DEFAULT_HEADER_POLICY).invalid).toBeUndefined();
  });

  test('a repeated header passes on with every value: a later non-ASCII one is named too; a removed gateway header never counts', () => {
    expect(screenHeaders({ 'x-a': 'ok' }, DEFAULT_HEADER_POLICY, undefined, { 'x-a': ['fine', '\xff'] }).invalid).toBe('x-a');
    expect(screenHeaders({ 'x-a': 'ok' }, DEFAULT_HEADER_POLICY, undefined, { 'x-a': ['fine'] }).invalid).toBeUndefined();
    expect(
      screenHeaders({ 'x-llm-d-inference-fairness-id': 'a' }, DEFAULT_HEADER_POLICY, undefined, {
        'x-llm-d-inference-fairness-id': ['\xff'],
      }).invalid,
    ).toBeUndefined();
  });

  test('a role or pod header cannot be trusted, and an unknown name is a mistake', () => {
    expect(() => headerPolicy(['epp-profile'])).toThrow(HeaderPolicyError);
    expect(() => headerPolicy(['x-gateway-destination-endpoint'])).toThrow(HeaderPolicyError);
    expect(() => headerPolicy(['x-my-header'])).toThrow(/any other header already passes/);
  });

  test('start-up refuses an untrustable name under the config key', async () => {
    const config = parseConfig(
      { server: { listen_addr: '127.0.0.1:0', metrics_addr: 'off', trusted_client_headers: ['epp-profile'] } },
      {},
    );
    await expect(startService(config, { log: silentLogger() })).rejects.toThrow(ConfigError);
    await expect(startService(config, { log: silentLogger() })).rejects.toThrow(
      /server\.trusted_client_headers: expected a header other than epp-profile/,
    );
  });

  test('an origin trusts its own headers only on requests from that origin, with the same value rule', () => {
    const policy = headerPolicy([], { 'async-processor': ['x-llm-d-inference-fairness-id'] });
    const sent = { 'x-llm-d-inference-fairness-id': 'acme', 'x-gateway-inference-fairness-id': 'acme' };
    expect(screenHeaders(sent, policy).headers).toEqual({});
    expect(screenHeaders(sent, policy, 'some-other-origin').headers).toEqual({});
    const s = screenHeaders(sent, policy, 'async-processor');
    expect(s.headers).toEqual({ 'x-llm-d-inference-fairness-id': 'acme' });
    expect(s.removed).toEqual(['x-gateway-inference-fairness-id']);
    expect(screenHeaders({ 'x-llm-d-inference-fairness-id': '\xff' }, policy, 'async-processor').invalid).toBe(
      'x-llm-d-inference-fairness-id',
    );
    expect(() => headerPolicy([], { 'async-processor': ['epp-profile'] })).toThrow(HeaderPolicyError);
  });

  test("server.trusted_origin_headers: the processor's stamps by default; a bad name stops start-up under its key", async () => {
    expect(parseConfig({}, {}).server.trustedOriginHeaders).toEqual([
      'x-llm-d-inference-fairness-id',
      'x-llm-d-inference-objective',
      'x-gateway-inference-objective',
    ]);
    expect(parseConfig({ server: { trusted_origin_headers: [] } }, {}).server.trustedOriginHeaders).toEqual([]);
    const config = parseConfig(
      { server: { listen_addr: '127.0.0.1:0', metrics_addr: 'off', trusted_origin_headers: ['x-gateway-destination-endpoint'] } },
      {},
    );
    await expect(startService(config, { log: silentLogger() })).rejects.toThrow(
      /server\.trusted_origin_headers: expected a header other than/,
    );
  });

  test('the config key takes a YAML list or, from the environment, a comma-separated string', () => {
    expect(
      parseConfig({ server: { trusted_client_headers: ['x-llm-d-slo-ttft-ms', 'X-SLO-TPOT-MS'] } }, {}).server.trustedClientHeaders,
    ).toEqual(['x-llm-d-slo-ttft-ms', 'x-slo-tpot-ms']);
    expect(
      parseConfig({}, { COORDINATOR_SERVER_TRUSTED_CLIENT_HEADERS: 'x-llm-d-slo-ttft-ms, x-llm-d-slo-tpot-ms' }).server
        .trustedClientHeaders,
    ).toEqual(['x-llm-d-slo-ttft-ms', 'x-llm-d-slo-tpot-ms']);
    expect(parseConfig({}, {}).server.trustedClientHeaders).toEqual([]);
    expect(() => parseConfig({ server: { trusted_client_headers: [1] } }, {})).toThrow(ConfigError);
  });
});

describe('PipelineHandler with the header policy', () => {
  let seen: Record<string, string>[] = [];
  const sideCall: Step = { type: 'prefill', execute: async (ctx: RequestContext) => void seen.push(ctx.forwardedHeaders()) };
  const objective: Step = {
    type: 'async-broker',
    execute: async (ctx: RequestContext) => ctx.stampHeader('x-llm-d-inference-objective', 'reserved'),
  };
  const decode: Step = {
    type: 'decode',
    execute: async (ctx: RequestContext) => {
      seen.push(ctx.forwardedHeaders());
      ctx.decode = { headers: { 'epp-profile': 'decode', 'x-request-id': ctx.requestId } };
    },
  };
  const handler = (trusted: string[] = []) =>
    new PipelineHandler({
      steps: [objective, sideCall, decode],
      maxBodyBytes: 1024,
      log: silentLogger(),
      headerPolicy: headerPolicy(trusted),
    });
  beforeEach(() => (seen = []));

  test('side calls never see a client gateway header; the forward removes them, keeping what the service sets', async () => {
    const ex = handler().begin({ method: 'POST', path: '/v1/chat/completions', headers: { ...SPOOFED, 'x-team': 'acme' } })!;
    const d = (await ex.complete(Buffer.from(CHAT_BODY))) as ForwardDecision;
    expect(d.kind).toBe('forward');
    for (const h of seen) {
      for (const name of GATEWAY_HEADERS.keys()) if (name !== 'x-llm-d-inference-objective') expect(h).not.toHaveProperty(name);
      expect(h['x-llm-d-inference-objective']).toBe('reserved');
      expect(h['x-team']).toBe('acme');
    }
    expect(d.setHeaders['x-llm-d-inference-objective']).toBe('reserved');
    expect(d.setHeaders['epp-profile']).toBe('decode');
    const expected = [...GATEWAY_HEADERS.keys()].filter((h) => h !== 'x-llm-d-inference-objective' && h !== 'epp-profile');
    expect([...d.removeHeaders].sort()).toEqual(expected.sort());
  });

  test("the async processor's origin: its fairness id reaches side calls and the forward; from a client it does not", async () => {
    const h = new PipelineHandler({
      steps: [sideCall, decode],
      maxBodyBytes: 1024,
      log: silentLogger(),
      headerPolicy: headerPolicy([], { 'async-processor': ['x-llm-d-inference-fairness-id'] }),
    });
    const headers = { 'x-llm-d-inference-fairness-id': 'acme' };
    const fromClient = (await h
      .begin({ method: 'POST', path: '/v1/chat/completions', headers })!
      .complete(Buffer.from(CHAT_BODY))) as ForwardDecision;
    expect(fromClient.removeHeaders).toEqual(['x-llm-d-inference-fairness-id']);
    for (const seenHeaders of seen) expect(seenHeaders).not.toHaveProperty('x-llm-d-inference-fairness-id');
    seen = [];
    const fromProcessor = (await h
      .begin({ method: 'POST', path: '/v1/chat/completions', headers, origin: 'async-processor' })!
      .complete(Buffer.from(CHAT_BODY))) as ForwardDecision;
    expect(fromProcessor.removeHeaders).toEqual([]);
    expect(seen).toHaveLength(2);
    for (const seenHeaders of seen) expect(seenHeaders['x-llm-d-inference-fairness-id']).toBe('acme');
  });

  test('a trusted SLO header reaches side calls and stays on the forward', async () => {
    const ex = handler(['x-llm-d-slo-ttft-ms']).begin({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'x-llm-d-slo-ttft-ms': '800', prefer: 'reserve-endpoint' },
    })!;
    const d = (await ex.complete(Buffer.from(CHAT_BODY))) as ForwardDecision;
    for (const h of seen) expect(h['x-llm-d-slo-ttft-ms']).toBe('800');
    expect(d.removeHeaders).toEqual(['prefer']);
  });

  test.each([
    ['POST', '/v1/chat/completions'],
    ['GET', '/v1/models'],
  ])('%s %s with a non-ASCII header value: 400 naming it, no step runs', async (method, path) => {
    const ex = handler().begin({ method, path, headers: { 'x-request-id': 'r-1', 'x-client-note': 'caf\xe9' } })!;
    // Refused from the head: the protocol layer sends this at once and reads no body.
    const d = ex.refused!;
    expect(d.status).toBe(400);
    expect(JSON.parse((d.body as Buffer).toString()).error.message).toBe(
      'header "x-client-note" has a value that is not visible ASCII (request_id: r-1)',
    );
    expect(seen).toHaveLength(0);
  });

  test("a pass-through request loses the client's gateway headers and gets the service's profile", async () => {
    const ex = handler().begin({
      method: 'GET',
      path: '/v1/models',
      headers: { 'x-gateway-inference-fairness-id': '\xff\xff', 'epp-profile': 'prefill', accept: 'application/json' },
    })!;
    const d = (await ex.complete(Buffer.alloc(0))) as ForwardDecision;
    expect(d).toMatchObject({ kind: 'forward', removeHeaders: ['x-gateway-inference-fairness-id'], body: null });
    expect(d.setHeaders['epp-profile']).toBe('decode');
    expect(seen).toHaveLength(0);
  });
});
