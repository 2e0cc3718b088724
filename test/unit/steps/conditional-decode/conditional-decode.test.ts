/**
 * conditional-decode (upstream's `conditional_decode_test.go` cases) against a local worker through
 * the real pooled client: hit (JSON and SSE), miss (412), errors passed through, transport
 * failures, body shaping per format, and cancellation of the relayed call.
 */
import { ConfigError } from '../../../../src/config/errors';
import { TransportError } from '../../../../src/pipeline/errors';
import { PipelineHandler } from '../../../../src/pipeline/handler';
import type { RespondDecision } from '../../../../src/pipeline/decision';
import type { StepParams, StepResponse } from '../../../../src/pipeline/step';
import { silentLogger } from '../../../../src/observability/logger';
import { createConditionalDecodeStep, relayedResponseHeaders } from '../../../../src/steps/conditional-decode';
import { entry, makeCtx, TestDeps } from '../fake-upstream';
import { readAll, ScriptedWorker, sleep, writeSse } from './worker';

const worker = new ScriptedWorker();
let td: TestDeps;

beforeAll(async () => {
  await worker.start();
  td = new TestDeps(worker.url, 2000);
});
afterAll(async () => {
  await td.close();
  await worker.stop();
});
beforeEach(() => worker.reset());

function step(params: StepParams = {}) {
  return createConditionalDecodeStep({ use_openai_format: true, ...params }, td.deps);
}

function served(outcome: unknown): StepResponse {
  expect(outcome).toBeDefined();
  return (outcome as { respond: StepResponse }).respond;
}

describe('conditional-decode: hit', () => {
  it('POSTs to the original path with decode headers and Prefer, and hands back the 200 JSON answer', async () => {
    const answer = { id: 'chatcmpl-1', choices: [{ message: { content: 'cached' } }] };
    worker.handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'x-inference-pod': 'decode-7', 'keep-alive': 'timeout=5' });
      res.end(JSON.stringify(answer));
    };
    const ctx = makeCtx({
      body: { model: 'm', messages: [{ role: 'user', content: 'hi' }] },
      headers: {
        authorization: 'Bearer t',
        'epp-profile': 'prefill',
        'content-length': '99',
        prefer: 'respond-async',
        'x-request-id': 'client-id',
      },
      requestId: 'rid-1',
      tokenIds: [1, 2, 3],
    });
    const r = served(await step().execute(ctx));

    expect(worker.seen).toHaveLength(1);
    const seen = worker.seen[0]!;
    expect(seen.path).toBe('/v1/chat/completions');
    expect(seen.headers['epp-profile']).toBe('decode');
    expect(seen.headers['prefer']).toBe('if-available');
    expect(seen.headers['x-request-id']).toBe('rid-1');
    expect(seen.headers['content-type']).toBe('application/json');
    expect(seen.headers['authorization']).toBe('Bearer t');
    expect(seen.json).toEqual({ model: 'm', messages: [{ role: 'user', content: 'hi' }], tokens: { token_ids: [1, 2, 3] } });

    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('application/json');
    expect(r.headers['x-inference-pod']).toBe('decode-7');
    for (const h of ['content-length', 'transfer-encoding', 'connection', 'keep-alive']) expect(r.headers[h]).toBeUndefined();
    expect(JSON.parse((await readAll(r.body)).toString())).toEqual(answer);
    // The probe does not touch the client body or the context.
    expect(ctx.body).toEqual({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    expect(ctx.decode).toBeNull();
  });

  it('relays an SSE answer as it streams: text/event-stream, every chunk and [DONE]', async () => {
    let lastWritten = 0;
    worker.handler = async (_req, res) => {
      await writeSse(res, ['{"delta":"a"}', '{"delta":"b"}', '[DONE]'], 150);
      lastWritten = Date.now();
    };
    const ctx = makeCtx({ body: { model: 'm', stream: true, messages: [] }, tokenIds: [1] });
    const r = served(await step().execute(ctx));
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('text/event-stream');
    expect(Buffer.isBuffer(r.body)).toBe(false);

    const reads: Array<{ at: number; text: string }> = [];
    for await (const chunk of r.body as AsyncIterable<Buffer>) reads.push({ at: Date.now(), text: chunk.toString() });
    const text = reads.map((x) => x.text).join('');
    expect(text).toBe('data: {"delta":"a"}\n\ndata: {"delta":"b"}\n\ndata: [DONE]\n\n');
    expect(worker.seen[0]!.json.stream).toBe(true);
    // The first chunk was in hand before the worker wrote its last one: nothing was buffered.
    expect(reads[0]!.at).toBeLessThan(lastWritten);
    expect(reads.length).toBeGreaterThanOrEqual(3);
  });

  it('an answer through the pipeline handler is a cache_hit respond decision', async () => {
    worker.handler = (_req, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    const handler = new PipelineHandler({ steps: [step()], maxBodyBytes: 1024, log: silentLogger() });
    const ex = handler.begin({ method: 'POST', path: '/v1/chat/completions', headers: { 'x-request-id': 'hit-1' } })!;
    const d = (await ex.complete(Buffer.from('{"model":"m","messages":[{"role":"user","content":"hi"}]}'))) as RespondDecision;
    expect(d.kind).toBe('respond');
    expect(d.status).toBe(200);
    expect(d.metadata).toMatchObject({ request_id: 'hit-1', path_taken: 'cache_hit', status: 200 });
    expect((await readAll(d.body)).toString()).toBe('{"ok":true}');
  });
});

describe('conditional-decode: miss and errors', () => {
  it('412: continues the pipeline, writes nothing, and keeps the connection for reuse', async () => {
    worker.handler = (_req, res) => {
      res.writeHead(412, { 'content-type': 'text/plain' });
      res.end('inference error: PreconditionFailed - no decode worker has the requested KV cache');
    };
    const before = worker.connections;
    const body = { model: 'm', prompt: 'hello' };
    for (let i = 0; i < 3; i++) {
      const ctx = makeCtx({ path: '/v1/completions', body: { ...body }, tokenIds: [5, 6] });
      expect(await step().execute(ctx)).toBeUndefined();
      expect(ctx.body).toEqual(body);
      expect(ctx.decode).toBeNull();
    }
    expect(worker.seen).toHaveLength(3);
    expect(worker.connections - before).toBeLessThanOrEqual(1);
  });

  it('a cascade after a miss runs the next steps (handler: forward decision, path_taken cascade)', async () => {
    worker.handler = (_req, res) => void res.writeHead(412).end('miss');
    let ranNext = false;
    const next = {
      type: 'decode',
      execute: async (ctx: import('../../../../src/pipeline/context').RequestContext) => {
        ranNext = true;
        ctx.decode = { headers: { 'epp-profile': 'decode' } };
      },
    };
    const handler = new PipelineHandler({ steps: [step(), next], maxBodyBytes: 1024, log: silentLogger() });
    const d = await handler
      .begin({ method: 'POST', path: '/v1/chat/completions', headers: {} })!
      .complete(Buffer.from('{"model":"m","messages":[{"role":"user","content":"hi"}]}'));
    expect(ranNext).toBe(true);
    expect(d.kind).toBe('forward');
    expect(d.metadata).toMatchObject({ path_taken: 'cascade' });
  });

  it.each([
    [500, '{"error":{"message":"engine died","code":500}}'],
    [503, 'overloaded'],
    [429, '{"error":"slow down"}'],
    [400, '{"error":"bad prompt"}'],
    [502, ''],
  ])('%i from the worker is the client answer, with its body (never classified)', async (status, text) => {
    worker.handler = (_req, res) => void res.writeHead(status, { 'content-type': 'application/json', 'x-why': 'test' }).end(text);
    const r = served(await step().execute(makeCtx()));
    expect(r.status).toBe(status);
    expect(r.headers['x-why']).toBe('test');
    expect((await readAll(r.body)).toString()).toBe(text);
  });

  it('no answer at all (connection refused): TransportError, answered 502 by the classifier', async () => {
    const dead = new TestDeps('http://127.0.0.1:1', 1000);
    try {
      const s = createConditionalDecodeStep({}, dead.deps);
      await expect(s.execute(makeCtx())).rejects.toBeInstanceOf(TransportError);
      const handler = new PipelineHandler({ steps: [s], maxBodyBytes: 1024, log: silentLogger() });
      const d = (await handler
        .begin({ method: 'POST', path: '/v1/chat/completions', headers: { 'x-request-id': 'x-9' } })!
        .complete(Buffer.from('{"messages":[{"role":"user","content":"hi"}]}'))) as RespondDecision;
      expect(d.status).toBe(502);
      expect(d.headers['content-type']).toBe('application/json');
      expect(JSON.parse((d.body as Buffer).toString()).error).toMatchObject({ type: 'api_error', code: 502 });
      expect(d.metadata).toMatchObject({ path_taken: 'error', error_step: 'conditional-decode', error_class: 'transport' });
    } finally {
      await dead.close();
    }
  });

  it('no response headers within gateway.timeout: a timed-out TransportError', async () => {
    const slow = new TestDeps(worker.url, 150);
    worker.handler = async (_req, res) => {
      await sleep(2000); // undici checks header timeouts on a coarse (~0.5 s) tick
      if (!res.destroyed) res.writeHead(200).end('{}');
    };
    try {
      const err = await createConditionalDecodeStep({}, slow.deps)
        .execute(makeCtx())
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TransportError);
      expect((err as TransportError).timedOut).toBe(true);
    } finally {
      await slow.close();
    }
  });
});

describe('conditional-decode: cancellation', () => {
  it('aborting the request (client gone) mid-relay closes the worker connection', async () => {
    worker.handler = (_req, res) => writeSse(res, ['1', '2', '3', '4', '5', '6'], 200);
    const controller = new AbortController();
    const r = served(await step().execute(makeCtx({ signal: controller.signal })));
    const it = (r.body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
    expect((await it.next()).value.toString()).toContain('data: 1');
    controller.abort();
    await expect(it.next()).rejects.toBeDefined();
    await worker.seen[0]!.closedEarly;
  });
});

describe('conditional-decode: body shape per format', () => {
  const okJson = (): void => {
    worker.handler = (_req, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  };

  it('chat without rendered tokens: body unchanged, no tokens field', async () => {
    okJson();
    await step().execute(makeCtx({ body: { model: 'm', messages: [] } }));
    expect(worker.seen[0]!.json).toEqual({ model: 'm', messages: [] });
  });

  it('chat with images: tokens carry F0 features (no kwargs)', async () => {
    okJson();
    await step().execute(makeCtx({ body: { model: 'm' }, tokenIds: [1, 9, 9, 2], entries: [entry(0, 'h0', 1, 2)] }));
    expect(worker.seen[0]!.json.tokens).toEqual({
      token_ids: [1, 9, 9, 2],
      features: { mm_hashes: { image: ['h0'] }, mm_placeholders: { image: [{ offset: 1, length: 2 }] } },
    });
  });

  it('completions: prompt becomes the token ids; without them the text prompt is kept', async () => {
    okJson();
    await step().execute(makeCtx({ path: '/v1/completions', body: { model: 'm', prompt: 'hello', max_tokens: 5 }, tokenIds: [7, 8] }));
    await step().execute(makeCtx({ path: '/v1/completions', body: { model: 'm', prompt: 'hello' } }));
    expect(worker.seen[0]!.path).toBe('/v1/completions');
    expect(worker.seen[0]!.json).toEqual({ model: 'm', prompt: [7, 8], max_tokens: 5 });
    expect(worker.seen[1]!.json).toEqual({ model: 'm', prompt: 'hello' });
  });

  it('generate: body unchanged, sent to the generate path', async () => {
    okJson();
    const body = { model: 'm', token_ids: [1, 2], sampling_params: { max_tokens: 3 } };
    await step().execute(makeCtx({ path: '/inference/v1/generate', body: { ...body }, tokenIds: [1, 2] }));
    expect(worker.seen[0]!.path).toBe('/inference/v1/generate');
    expect(worker.seen[0]!.json).toEqual(body);
  });

  it('chat under use_openai_format=false: the chat path, the body unchanged, as upstream', async () => {
    okJson();
    await step({ use_openai_format: false }).execute(makeCtx({ body: { model: 'm', messages: [] }, tokenIds: [1, 2] }));
    expect(worker.seen[0]!.path).toBe('/v1/chat/completions');
    expect(worker.seen[0]!.json).toEqual({ model: 'm', messages: [] });
  });
});

describe('conditional-decode: construction and helpers', () => {
  it('rejects a missing gateway and a non-boolean use_openai_format; ignores other keys', () => {
    expect(() => createConditionalDecodeStep({}, { ...td.deps, gateway: undefined })).toThrow(/^gateway\.address: /);
    expect(() => createConditionalDecodeStep({ use_openai_format: 'yes' }, td.deps)).toThrow(ConfigError);
    expect(createConditionalDecodeStep({ kv_connector: 'kv-nixl', endpoint: 'x' }, td.deps).type).toBe('conditional-decode');
  });

  it('drops hop-by-hop headers and those the connection header names', () => {
    expect(
      relayedResponseHeaders({
        connection: 'keep-alive, x-secret',
        'x-secret': 's',
        'keep-alive': 'timeout=5',
        'transfer-encoding': 'chunked',
        'content-length': '10',
        'content-type': 'text/event-stream',
        'x-inference-pod': 'p',
      }),
    ).toEqual({ 'content-type': 'text/event-stream', 'x-inference-pod': 'p' });
  });
});
