/**
 * The Prometheus families: upstream names, labels and buckets; model_name bounding; and what the
 * pipeline, the side-call client and the stream hooks record through them.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PooledSideCallClient } from '../../../src/gateway/client';
import type { RequestContext } from '../../../src/pipeline/context';
import { MediaUnavailableError, TransportError, UpstreamError, UpstreamInvalidError } from '../../../src/pipeline/errors';
import { PipelineHandler } from '../../../src/pipeline/handler';
import type { Step } from '../../../src/pipeline/step';
import { silentLogger } from '../../../src/observability/logger';
import { answerLeft } from '../../support/after-answer';
import {
  CoordinatorMetrics,
  LATENCY_BUCKETS,
  MAX_MODEL_NAMES,
  ModelNameLabels,
  SIZE_BUCKETS,
  TOKEN_BUCKETS,
} from '../../../src/observability/metrics';
import { startMetricsServer, type MetricsServer } from '../../../src/observability/metrics-server';

type Labels = Record<string, string | number>;
interface MetricValue {
  value: number;
  labels: Labels;
  metricName?: string;
}

async function values(m: CoordinatorMetrics, name: string): Promise<MetricValue[]> {
  const metric = m.registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name}`);
  return (await metric.get()).values as MetricValue[];
}

/** The value of the series of `name` whose labels include `labels` (0 when absent). */
async function value(m: CoordinatorMetrics, name: string, labels: Labels = {}): Promise<number> {
  const all = await values(m, name);
  const hit = all.find(
    (v) => (v.metricName === undefined || v.metricName === name) && Object.entries(labels).every(([k, x]) => v.labels[k] === x),
  );
  return hit?.value ?? 0;
}

/** `_count` of a histogram series. */
async function count(m: CoordinatorMetrics, name: string, labels: Labels = {}): Promise<number> {
  const all = await values(m, name);
  const hit = all.find((v) => v.metricName === `${name}_count` && Object.entries(labels).every(([k, x]) => v.labels[k] === x));
  return hit?.value ?? 0;
}

function step(type: string, run: (ctx: RequestContext) => unknown = () => undefined): Step {
  return { type, execute: async (ctx) => (await run(ctx)) as never };
}

const decode = step('decode', (ctx) => {
  ctx.decode = { headers: { 'epp-profile': 'decode' } };
});
const render = step('render', (ctx) => {
  ctx.tokenIds = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
});

function handlerWith(metrics: CoordinatorMetrics, steps: Step[], maxBodyBytes = 4096): PipelineHandler {
  return new PipelineHandler({ steps, maxBodyBytes, log: silentLogger(), observer: metrics });
}

/** Messages with the shape the pipeline checks before any step (request-shape.ts). */
const MESSAGES = [{ role: 'user', content: 'hi' }];

async function send(h: PipelineHandler, body: unknown, path = '/v1/chat/completions'): Promise<void> {
  const ex = h.begin({ method: 'POST', path, headers: {} });
  if (!ex) throw new Error('expected an exchange');
  await ex.complete(Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)));
  await answerLeft();
}

describe('metric families', () => {
  const m = new CoordinatorMetrics({ processMetrics: false });

  test.each([
    ['llm_d_coordinator_request_total', 'counter', ['model_name']],
    ['llm_d_coordinator_request_error_total', 'counter', ['model_name', 'error_code']],
    ['llm_d_coordinator_request_duration_seconds', 'histogram', ['model_name']],
    ['llm_d_coordinator_request_size_bytes', 'histogram', ['model_name']],
    ['llm_d_coordinator_request_input_tokens', 'histogram', ['model_name']],
    ['llm_d_coordinator_request_running', 'gauge', ['model_name']],
    ['llm_d_coordinator_step_duration_seconds', 'histogram', ['step']],
    ['llm_d_coordinator_step_errors_total', 'counter', ['step', 'error_code']],
    ['llm_d_coordinator_step_running', 'gauge', ['step']],
    ['llm_d_coordinator_upstream_request_total', 'counter', ['upstream']],
    ['llm_d_coordinator_upstream_request_duration_seconds', 'histogram', ['upstream']],
    ['llm_d_coordinator_execution_path_total', 'counter', ['model_name', 'path']],
    ['llm_d_coordinator_conditional_decode_probes_total', 'counter', ['result']],
    ['llm_d_coordinator_orchestration_overhead_seconds', 'histogram', ['route']],
    ['epd_coordinator_inflight_requests', 'gauge', []],
    ['epd_coordinator_extproc_active_streams', 'gauge', []],
    ['epd_coordinator_extproc_stream_duration_seconds', 'histogram', []],
    ['epd_coordinator_decisions_total', 'counter', ['path']],
    ['epd_coordinator_side_call_duration_seconds', 'histogram', ['phase', 'status']],
    ['epd_coordinator_side_call_no_endpoint_total', 'counter', ['phase', 'reason']],
  ])('%s is a %s labelled %j', async (name, type, labelNames) => {
    const metric = m.registry.getSingleMetric(name) as unknown as { labelNames: string[]; get(): Promise<{ type: string }> } | undefined;
    expect(metric).toBeDefined();
    expect((await metric!.get()).type).toBe(type);
    expect([...metric!.labelNames].sort()).toEqual([...labelNames].sort());
  });

  test("buckets are upstream's ladders", () => {
    const buckets = (name: string) => (m.registry.getSingleMetric(name) as unknown as { upperBounds: number[] }).upperBounds;
    expect(LATENCY_BUCKETS).toHaveLength(35);
    expect(LATENCY_BUCKETS[0]).toBe(0.005);
    expect(LATENCY_BUCKETS[LATENCY_BUCKETS.length - 1]).toBe(3600);
    expect(SIZE_BUCKETS[0]).toBe(64);
    expect(SIZE_BUCKETS[SIZE_BUCKETS.length - 1]).toBe(1073741824);
    expect(SIZE_BUCKETS).toHaveLength(25);
    expect(TOKEN_BUCKETS).toEqual([
      1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576,
    ]);
    expect(buckets('llm_d_coordinator_request_duration_seconds')).toEqual(LATENCY_BUCKETS);
    expect(buckets('llm_d_coordinator_step_duration_seconds')).toEqual(LATENCY_BUCKETS);
    expect(buckets('llm_d_coordinator_request_size_bytes')).toEqual(SIZE_BUCKETS);
    expect(buckets('llm_d_coordinator_request_input_tokens')).toEqual(TOKEN_BUCKETS);
  });
});

describe('model_name', () => {
  test('"" is unknown; the first 1000 names are kept, later ones are other; long names are other', () => {
    const labels = new ModelNameLabels();
    expect(labels.label('')).toBe('unknown');
    for (let i = 0; i < MAX_MODEL_NAMES; i++) expect(labels.label(`m-${i}`)).toBe(`m-${i}`);
    expect(labels.label('one-too-many')).toBe('other');
    expect(labels.label('m-7')).toBe('m-7');
    expect(new ModelNameLabels().label('x'.repeat(257))).toBe('other');
  });

  test('a request series carries the bounded name', async () => {
    const m = new CoordinatorMetrics({ processMetrics: false, maxModelNames: 1 });
    const h = handlerWith(m, [decode]);
    await send(h, { model: 'first', messages: MESSAGES });
    await send(h, { model: 'second', messages: MESSAGES });
    await send(h, { messages: MESSAGES });
    expect(await value(m, 'llm_d_coordinator_request_total', { model_name: 'first' })).toBe(1);
    expect(await value(m, 'llm_d_coordinator_request_total', { model_name: 'other' })).toBe(1);
    expect(await value(m, 'llm_d_coordinator_request_total', { model_name: 'unknown' })).toBe(1);
  });
});

describe('pipeline hooks', () => {
  test('a cascade records request, size, tokens, steps, execution path and decision', async () => {
    const m = new CoordinatorMetrics({ processMetrics: false });
    const h = handlerWith(m, [render, step('prefill'), decode]);
    await send(h, { model: 'llama', messages: MESSAGES });
    expect(await value(m, 'llm_d_coordinator_request_total', { model_name: 'llama' })).toBe(1);
    expect(await count(m, 'llm_d_coordinator_request_duration_seconds', { model_name: 'llama' })).toBe(1);
    expect(await count(m, 'llm_d_coordinator_request_size_bytes', { model_name: 'llama' })).toBe(1);
    const tokens = await values(m, 'llm_d_coordinator_request_input_tokens');
    expect(tokens.find((v) => v.metricName?.endsWith('_sum') && v.labels['model_name'] === 'llama')?.value).toBe(10);
    for (const s of ['render', 'prefill', 'decode']) {
      expect(await count(m, 'llm_d_coordinator_step_duration_seconds', { step: s })).toBe(1);
      expect(await value(m, 'llm_d_coordinator_step_running', { step: s })).toBe(0);
    }
    expect(await value(m, 'llm_d_coordinator_execution_path_total', { model_name: 'llama', path: 'prefill-decode' })).toBe(1);
    expect(await value(m, 'epd_coordinator_decisions_total', { path: 'cascade' })).toBe(1);
    expect(await value(m, 'llm_d_coordinator_request_running', { model_name: 'llama' })).toBe(0);
    expect(await value(m, 'llm_d_coordinator_request_running', { model_name: 'unknown' })).toBe(0);
    expect(await value(m, 'epd_coordinator_inflight_requests')).toBe(0);
    expect(await count(m, 'llm_d_coordinator_orchestration_overhead_seconds', { route: 'chat_completions' })).toBe(1);
  });

  test.each([
    ['upstream_5xx', new UpstreamError('prefill', 503, 'body')],
    ['upstream_4xx', new UpstreamError('prefill', 429, 'body')],
    ['upstream_transport', new TransportError('prefill', 'request failed: ECONNREFUSED')],
    ['internal', new Error('boom')],
    // Upstream's error_code vocabulary has no finer class: these count as internal there.
    ['internal', new UpstreamInvalidError('prefill: decode response: expected an object, got array')],
    ['internal', new MediaUnavailableError('downloading http://img/x: HTTP 404', 404)],
  ])('a failing step counts a step error and a request error: %s', async (code, err) => {
    const m = new CoordinatorMetrics({ processMetrics: false });
    const h = handlerWith(m, [
      step('prefill', () => {
        throw err;
      }),
      decode,
    ]);
    await send(h, { model: 'm', messages: MESSAGES });
    expect(await value(m, 'llm_d_coordinator_step_errors_total', { step: 'prefill', error_code: code })).toBe(1);
    expect(await value(m, 'llm_d_coordinator_request_error_total', { model_name: 'm', error_code: code })).toBe(1);
    expect(await value(m, 'epd_coordinator_decisions_total', { path: 'error' })).toBe(1);
    expect(await value(m, 'llm_d_coordinator_step_running', { step: 'prefill' })).toBe(0);
    // decode never started: no execution path
    expect(await values(m, 'llm_d_coordinator_execution_path_total')).toEqual([]);
  });

  test('bad JSON and an oversized body are bad_request for model unknown', async () => {
    const m = new CoordinatorMetrics({ processMetrics: false });
    const h = handlerWith(m, [decode], 10);
    await send(h, '{nope');
    h.begin({ method: 'POST', path: '/v1/completions', headers: {} })!.tooLarge(11);
    expect(await value(m, 'llm_d_coordinator_request_total', { model_name: 'unknown' })).toBe(2);
    expect(await value(m, 'llm_d_coordinator_request_error_total', { model_name: 'unknown', error_code: 'bad_request' })).toBe(2);
    expect(await value(m, 'epd_coordinator_inflight_requests')).toBe(0);
  });

  test('a client gone before the body arrived ends the request (in-flight back to 0), counted as cancelled', async () => {
    const m = new CoordinatorMetrics({ processMetrics: false });
    const h = handlerWith(m, [decode]);
    const ex = h.begin({ method: 'POST', path: '/v1/completions', headers: {} })!;
    expect(await value(m, 'epd_coordinator_inflight_requests')).toBe(1);
    expect(await value(m, 'llm_d_coordinator_request_running', { model_name: 'unknown' })).toBe(1);
    ex.abort('client went away');
    ex.abort('again');
    expect(await value(m, 'epd_coordinator_inflight_requests')).toBe(0);
    expect(await value(m, 'llm_d_coordinator_request_running', { model_name: 'unknown' })).toBe(0);
    expect(await value(m, 'llm_d_coordinator_request_error_total', { error_code: 'cancelled' })).toBe(1);
  });

  test("a step serving a worker's answer is a cache_hit; requests Envoy passes through are counted as passthrough", async () => {
    const m = new CoordinatorMetrics({ processMetrics: false });
    const h = handlerWith(m, [
      step('conditional-decode', () => ({ respond: { status: 200, headers: {}, body: Buffer.from('x') }, cacheHit: true })),
      decode,
    ]);
    await send(h, { model: 'm', messages: MESSAGES });
    expect(h.begin({ method: 'GET', path: '/v1/models', headers: {} })).not.toBeNull();
    expect(await value(m, 'epd_coordinator_decisions_total', { path: 'cache_hit' })).toBe(1);
    expect(await value(m, 'epd_coordinator_decisions_total', { path: 'passthrough' })).toBe(1);
    expect(await value(m, 'llm_d_coordinator_execution_path_total', { model_name: 'm', path: 'decode-only' })).toBe(1);
  });

  test("a step's own answer (an async-broker 202, a refusal) is a step_response, not a cache_hit", async () => {
    const m = new CoordinatorMetrics({ processMetrics: false });
    const h = handlerWith(m, [step('async-broker', () => ({ respond: { status: 202, headers: {}, body: Buffer.from('{}') } })), decode]);
    await send(h, { model: 'm', messages: MESSAGES });
    expect(await value(m, 'epd_coordinator_decisions_total', { path: 'step_response' })).toBe(1);
    expect(await value(m, 'epd_coordinator_decisions_total', { path: 'cache_hit' })).toBe(0);
  });

  test('stream hooks: active streams up and down, one duration per stream', async () => {
    const m = new CoordinatorMetrics({ processMetrics: false });
    const closeA = m.streams.opened();
    const closeB = m.streams.opened();
    expect(await value(m, 'epd_coordinator_extproc_active_streams')).toBe(2);
    closeA();
    closeB();
    expect(await value(m, 'epd_coordinator_extproc_active_streams')).toBe(0);
    expect(await count(m, 'epd_coordinator_extproc_stream_duration_seconds')).toBe(2);
  });
});

describe('side calls through the real client', () => {
  let server: Server;
  let base: string;
  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.url === '/hang') return; // never answers
        const status = Number(req.url?.slice(1)) || 200;
        res.writeHead(status, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  test('every call is recorded by phase and status: HTTP status, timeout, cancelled', async () => {
    const m = new CoordinatorMetrics({ processMetrics: false });
    const client = new PooledSideCallClient(base, { maxIdleConns: 4, idleTimeoutMs: 1000, observer: m.sideCalls });
    const signal = new AbortController().signal;
    await client.post('/200', {}, '{}', { step: 'prefill', signal });
    await client.post('/200', {}, '{}', { step: 'encode[0]', signal });
    await client.post('/200', {}, '{}', { step: 'encode[1]', signal });
    await client.post('/503', {}, '{}', { step: 'prefill', signal });
    await expect(client.post('/hang', {}, '{}', { step: 'render', signal, headersTimeoutMs: 50 })).rejects.toThrow(TransportError);
    const ac = new AbortController();
    const pending = client.post('/hang', {}, '{}', { step: 'render', signal: ac.signal });
    setTimeout(() => ac.abort(), 20);
    await expect(pending).rejects.toThrow(/cancelled/);
    await client.post('/412', {}, '{}', { step: 'conditional-decode', signal, okStatuses: [200, 412] });
    const streamed = await client.postStreaming('/200', {}, '{}', { step: 'conditional-decode', signal });
    for await (const _ of streamed.body) void _;
    await client.close();

    expect(await count(m, 'epd_coordinator_side_call_duration_seconds', { phase: 'prefill', status: '200' })).toBe(1);
    expect(await count(m, 'epd_coordinator_side_call_duration_seconds', { phase: 'prefill', status: '503' })).toBe(1);
    expect(await count(m, 'epd_coordinator_side_call_duration_seconds', { phase: 'encode', status: '200' })).toBe(2);
    expect(await count(m, 'epd_coordinator_side_call_duration_seconds', { phase: 'render', status: 'timeout' })).toBe(1);
    expect(await count(m, 'epd_coordinator_side_call_duration_seconds', { phase: 'render', status: 'cancelled' })).toBe(1);
    expect(await value(m, 'llm_d_coordinator_upstream_request_total', { upstream: 'encode' })).toBe(2);
    expect(await value(m, 'llm_d_coordinator_upstream_request_total', { upstream: 'prefill' })).toBe(2);
    expect(await count(m, 'llm_d_coordinator_upstream_request_duration_seconds', { upstream: 'render' })).toBe(2);
    expect(await value(m, 'llm_d_coordinator_conditional_decode_probes_total', { result: 'deferred' })).toBe(1);
    expect(await value(m, 'llm_d_coordinator_conditional_decode_probes_total', { result: 'served' })).toBe(1);
  });

  test('a client without an observer works as before', async () => {
    const client = new PooledSideCallClient(base, { maxIdleConns: 1, idleTimeoutMs: 1000 });
    const res = await client.post('/200', {}, '{}', { step: 'prefill', signal: new AbortController().signal });
    expect(res.status).toBe(200);
    await client.close();
  });
});

describe('/metrics listener', () => {
  let srv: MetricsServer;
  const m = new CoordinatorMetrics();
  beforeAll(async () => {
    srv = await startMetricsServer({ host: '127.0.0.1', port: 0 }, m, silentLogger());
  });
  afterAll(() => srv.close());

  test('GET /metrics serves the text exposition with process metrics; other paths 404, other methods 405', async () => {
    m.decided('route');
    const res = await fetch(`http://127.0.0.1:${srv.port}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    expect(text).toMatch(/^epd_coordinator_decisions_total\{path="route"\} 1$/m);
    expect(text).toMatch(/^# TYPE llm_d_coordinator_request_duration_seconds histogram$/m);
    expect(text).toMatch(/^process_cpu_seconds_total /m);
    expect((await fetch(`http://127.0.0.1:${srv.port}/`)).status).toBe(404);
    expect((await fetch(`http://127.0.0.1:${srv.port}/metrics`, { method: 'POST' })).status).toBe(405);
  });
});
