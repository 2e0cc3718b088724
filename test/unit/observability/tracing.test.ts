/**
 * W3C trace context and spans: the client's traceparent reaches side calls with tracing off (no
 * spans); with tracing on, request -> pipeline -> step -> side-call spans nest under the client's
 * trace and the side call carries our span id.
 */
import { AlwaysOnSampler, InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { PooledSideCallClient, type SideCallClient } from '../../../src/gateway/client';
import type { ForwardDecision, RespondDecision } from '../../../src/pipeline/decision';
import { UpstreamError } from '../../../src/pipeline/errors';
import { PipelineHandler } from '../../../src/pipeline/handler';
import type { PipelineObserver } from '../../../src/pipeline/observer';
import type { Step } from '../../../src/pipeline/step';
import { silentLogger } from '../../../src/observability/logger';
import { answerLeft } from '../../support/after-answer';
import { formatTraceparent, parseTraceparent, Tracing } from '../../../src/observability/tracing';
import { FakeUpstream } from '../steps/fake-upstream';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE_ID}-${CLIENT_SPAN}-01`;
const TRACESTATE = 'vendor=opaque,other=1';

/** A step that makes one side call with the context's forwarded headers, as the real steps do. */
function callingStep(type: string, client: SideCallClient, path: string): Step {
  return {
    type,
    execute: async (ctx) => {
      const res = await client.post(path, { ...ctx.forwardedHeaders(), 'epp-profile': type }, '{}', { step: type, signal: ctx.signal });
      if (res.status !== 200) throw new UpstreamError(type, res.status, res.body.toString());
    },
  };
}

const decode: Step = {
  type: 'decode',
  execute: async (ctx) => {
    ctx.decode = { headers: { 'epp-profile': 'decode' } };
  },
};

let upstream: FakeUpstream;
beforeAll(async () => {
  upstream = await new FakeUpstream().start();
});
afterAll(() => upstream.stop());
beforeEach(() => upstream.reset());

function setup(observer?: PipelineObserver, clientObserver?: Tracing['sideCalls']) {
  const client = new PooledSideCallClient(upstream.url, { maxIdleConns: 2, idleTimeoutMs: 1000, observer: clientObserver });
  const handler = new PipelineHandler({
    steps: [callingStep('prefill', client, '/v1/completions'), decode],
    maxBodyBytes: 4096,
    log: silentLogger(),
    observer,
  });
  return { client, handler };
}

async function send(handler: PipelineHandler, headers: Record<string, string>) {
  const ex = handler.begin({ method: 'POST', path: '/v1/completions', headers })!;
  const decision = await ex.complete(Buffer.from(JSON.stringify({ model: 'm', prompt: 'hi' })));
  await answerLeft();
  return decision;
}

describe('traceparent parsing', () => {
  test('accepts a valid header and rejects malformed or all-zero ids', () => {
    expect(parseTraceparent(TRACEPARENT)).toMatchObject({ traceId: TRACE_ID, spanId: CLIENT_SPAN, traceFlags: 1, isRemote: true });
    expect(parseTraceparent(TRACEPARENT, 'a=1')!.traceState!.get('a')).toBe('1');
    for (const bad of [
      '',
      'garbage',
      `ff-${TRACE_ID}-${CLIENT_SPAN}-01`,
      `00-${'0'.repeat(32)}-${CLIENT_SPAN}-01`,
      `00-${TRACE_ID}-${'0'.repeat(16)}-01`,
      `00-${TRACE_ID.toUpperCase()}-${CLIENT_SPAN}-01`,
      `00-${TRACE_ID}-${CLIENT_SPAN}-01-extra`,
    ]) {
      expect(parseTraceparent(bad)).toBeUndefined();
    }
    // A later version may append fields.
    expect(parseTraceparent(`01-${TRACE_ID}-${CLIENT_SPAN}-00-more`)).toMatchObject({ traceFlags: 0 });
    expect(formatTraceparent({ traceId: TRACE_ID, spanId: CLIENT_SPAN, traceFlags: 1 })).toBe(TRACEPARENT);
  });
});

describe('tracing off', () => {
  test("the side call carries the client's traceparent and tracestate unchanged; nothing is stamped", async () => {
    const { client, handler } = setup();
    const d = (await send(handler, { traceparent: TRACEPARENT, tracestate: TRACESTATE })) as ForwardDecision;
    await client.close();
    expect(d.kind).toBe('forward');
    expect(upstream.seen).toHaveLength(1);
    expect(upstream.seen[0]!.headers['traceparent']).toBe(TRACEPARENT);
    expect(upstream.seen[0]!.headers['tracestate']).toBe(TRACESTATE);
    expect(d.setHeaders['traceparent']).toBeUndefined();
  });
});

describe('tracing on', () => {
  let exporter: InMemorySpanExporter;
  let tracing: Tracing;
  beforeEach(() => {
    exporter = new InMemorySpanExporter();
    tracing = new Tracing({ log: silentLogger(), exporter, sampler: new AlwaysOnSampler(), exportImmediately: true });
  });
  afterEach(() => tracing.shutdown());

  const byName = (spans: ReadableSpan[], name: string): ReadableSpan => {
    const hits = spans.filter((s) => s.name === name);
    expect(hits).toHaveLength(1);
    return hits[0]!;
  };
  const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

  test("request > pipeline > step > side call nest under the client's trace; the side call carries our span id", async () => {
    const { client, handler } = setup(tracing, tracing.sideCalls);
    const d = (await send(handler, { traceparent: TRACEPARENT, tracestate: TRACESTATE })) as ForwardDecision;
    await client.close();

    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => s.name).sort()).toEqual(['POST /v1/completions', 'POST prefill', 'decode', 'pipeline', 'prefill'].sort());
    for (const s of spans) expect(s.spanContext().traceId).toBe(TRACE_ID);
    const request = byName(spans, 'POST /v1/completions');
    const pipeline = byName(spans, 'pipeline');
    const prefill = byName(spans, 'prefill');
    const decodeSpan = byName(spans, 'decode');
    const sideCall = byName(spans, 'POST prefill');
    expect(request.kind).toBe(SpanKind.SERVER);
    expect(parentOf(request)).toBe(CLIENT_SPAN);
    expect(parentOf(pipeline)).toBe(request.spanContext().spanId);
    expect(parentOf(prefill)).toBe(pipeline.spanContext().spanId);
    expect(parentOf(decodeSpan)).toBe(pipeline.spanContext().spanId);
    expect(parentOf(sideCall)).toBe(prefill.spanContext().spanId);
    expect(sideCall.kind).toBe(SpanKind.CLIENT);
    expect(sideCall.attributes['http.response.status_code']).toBe(200);
    expect(pipeline.attributes['gen_ai.request.model']).toBe('m');
    expect(pipeline.attributes['llm_d.coordinator.pipeline.step_count']).toBe(2);
    expect(pipeline.attributes['llm_d.coordinator.pipeline.execution_path']).toBe('prefill-decode');
    expect(request.attributes['llm_d.coordinator.path_taken']).toBe('cascade');

    // On the wire: the client's trace id, our side-call span as parent, tracestate kept.
    const seen = upstream.seen[0]!.headers;
    expect(seen['traceparent']).toBe(`00-${TRACE_ID}-${sideCall.spanContext().spanId}-01`);
    expect(seen['tracestate']).toBe(TRACESTATE);
    // The final request Envoy forwards descends from the decode step.
    expect(d.setHeaders['traceparent']).toBe(`00-${TRACE_ID}-${decodeSpan.spanContext().spanId}-01`);
  });

  test('a failing step marks its span, the pipeline and the request as errors, without the upstream body', async () => {
    const { client, handler } = setup(tracing, tracing.sideCalls);
    upstream.respond = () => ({ status: 503, body: 'secret upstream body' });
    const d = (await send(handler, {})) as RespondDecision;
    await client.close();
    expect(d.status).toBe(502);
    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => s.name).sort()).toEqual(['POST /v1/completions', 'POST prefill', 'pipeline', 'prefill'].sort());
    for (const name of ['POST /v1/completions', 'POST prefill', 'pipeline', 'prefill']) {
      const s = byName(spans, name);
      expect(s.status.code).toBe(SpanStatusCode.ERROR);
      expect(s.status.message ?? '').not.toContain('secret');
    }
    // Without a client traceparent the request span starts a new trace.
    expect(byName(spans, 'POST /v1/completions').parentSpanContext).toBeUndefined();
  });

  test('a body that does not parse gets a request span and no pipeline span', async () => {
    const { client, handler } = setup(tracing, tracing.sideCalls);
    const ex = handler.begin({ method: 'POST', path: '/v1/completions', headers: { traceparent: TRACEPARENT } })!;
    await ex.complete(Buffer.from('{'));
    await answerLeft();
    await client.close();
    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => s.name)).toEqual(['POST /v1/completions']);
    expect(spans[0]!.attributes['error.type']).toBe('bad_request');
  });
});
