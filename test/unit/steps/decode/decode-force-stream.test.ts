/**
 * decode `force_stream` against a real HTTP worker on loopback (reference §12.3.10): what the
 * worker is sent, what the client is answered, and what is counted, on every path.
 */
import { PooledSideCallClient } from '../../../../src/gateway/client';
import { CancelledError, TransportError } from '../../../../src/pipeline/errors';
import type { StepDeps, StepOutcome, StepParams, StepResponse } from '../../../../src/pipeline/step';
import { createDecodeStep } from '../../../../src/steps/decode';
import { FakeUpstream, makeCtx, useFakeUpstreams } from '../fake-upstream';

const up = useFakeUpstreams();
const { gateway } = up;

let results: string[] = [];
let reserved = 0;
beforeEach(() => {
  results = [];
  reserved = 0;
});

function deps(over: Partial<StepDeps> = {}): StepDeps {
  return { ...up.td.deps, forceStream: { result: (_m, r) => results.push(r), reservedBytes: (b) => (reserved = b) }, ...over };
}
function decode(params: StepParams = {}, d: StepDeps = deps()) {
  return createDecodeStep({ use_openai_format: true, force_stream: true, ...params }, d);
}
const sse = (frames: unknown[], tail = 'data: [DONE]\n\n'): string => frames.map((f) => `data: ${JSON.stringify(f)}\n\n`).join('') + tail;
const SSE_HEADERS = { 'content-type': 'text/event-stream' };

async function bodyText(r: StepResponse): Promise<string> {
  if (Buffer.isBuffer(r.body)) return r.body.toString();
  const parts: Buffer[] = [];
  for await (const c of r.body) parts.push(c);
  return Buffer.concat(parts).toString();
}
function respond(o: StepOutcome): StepResponse {
  if (!o || !('respond' in o)) throw new Error('expected a local answer');
  return o.respond;
}

describe('decode force_stream', () => {
  it('chat: the worker gets stream:true and include_usage; the client one JSON reply', async () => {
    gateway.respond = () => ({
      headers: SSE_HEADERS,
      body: sse([
        { id: 'c1', model: 'm', choices: [{ index: 0, delta: { role: 'assistant', content: 'Hello' } }] },
        { choices: [{ index: 0, delta: { content: ' world' }, finish_reason: 'stop' }] },
        { choices: [], usage: { completion_tokens: 7 } },
      ]),
    });
    const ctx = makeCtx({
      body: { model: 'm', messages: [], max_tokens: 10, stream_options: { continuous_usage_stats: true } },
      tokenIds: [1, 2],
    });
    const res = respond(await decode().execute(ctx));
    expect(gateway.seen[0]!.json).toMatchObject({ stream: true, stream_options: { continuous_usage_stats: true, include_usage: true } });
    expect(gateway.seen[0]!.headers['epp-profile']).toBe('decode');
    expect(ctx.body['stream']).toBeUndefined();
    expect(res.status).toBe(200);
    expect(JSON.parse(await bodyText(res))).toEqual({
      id: 'c1',
      model: 'm',
      object: 'chat.completion',
      choices: [{ index: 0, logprobs: null, finish_reason: 'stop', message: { role: 'assistant', content: 'Hello world' } }],
      usage: { completion_tokens: 7 },
    });
    expect(results).toEqual(['forced']);
  });

  it('a streaming client request is the normal forwarded decode', async () => {
    const ctx = makeCtx({ body: { model: 'm', stream: true }, tokenIds: [1] });
    expect(await decode().execute(ctx)).toBeUndefined();
    expect(ctx.decode).toBeDefined();
    expect(gateway.seen).toHaveLength(0);
    expect(results).toEqual([]);
  });

  it.each([{ tools: [{ type: 'function' }] }, { functions: [{}] }, { logprobs: true }, { logprobs: 0 }])(
    'lossy %j passes through (fallback_unsupported)',
    async (extra) => {
      const ctx = makeCtx({ body: { model: 'm', ...extra }, tokenIds: [1] });
      expect(await decode().execute(ctx)).toBeUndefined();
      expect(gateway.seen).toHaveLength(0);
      expect(results).toEqual(['fallback_unsupported']);
    },
  );

  it('generate: buffered, reserved and released', async () => {
    gateway.respond = () => ({
      headers: SSE_HEADERS,
      body: sse([
        { request_id: 'g1', choices: [{ index: 0, token_ids: [1, 2], finish_reason: null }] },
        { request_id: 'g1', choices: [{ index: 0, token_ids: [3, 4], finish_reason: 'length' }] },
      ]),
    });
    const ctx = makeCtx({ path: '/inference/v1/generate', body: { model: 'm', token_ids: [9], sampling_params: { max_tokens: 4 } } });
    const res = respond(await decode().execute(ctx));
    expect(gateway.seen[0]!.json).not.toHaveProperty('stream_options');
    expect(res.headers['content-length']).toBe(String((res.body as Buffer).length));
    expect(JSON.parse(await bodyText(res))).toEqual({
      request_id: 'g1',
      prompt_logprobs: null,
      kv_transfer_params: null,
      choices: [{ index: 0, logprobs: null, finish_reason: 'length', token_ids: [1, 2, 3, 4] }],
    });
    expect(results).toEqual(['forced']);
    expect(reserved).toBe(0);
  });

  it('a per-request cap too small for the token limit passes through (fallback_unbounded)', async () => {
    const ctx = makeCtx({ path: '/inference/v1/generate', body: { model: 'm', sampling_params: { max_tokens: 100000 } } });
    expect(await decode({ force_stream_max_request_size: '4KiB' }).execute(ctx)).toBeUndefined();
    expect(gateway.seen).toHaveLength(0);
    expect(results).toEqual(['fallback_unbounded']);
  });

  it('upstream 4xx/5xx: that status, its content type and body; nothing counted', async () => {
    for (const status of [400, 503]) {
      results = [];
      gateway.respond = () => ({ status, body: { error: 'boom' } });
      const res = respond(await decode().execute(makeCtx({ body: { model: 'm' }, tokenIds: [1] })));
      expect(res.status).toBe(status);
      expect(res.headers['content-type']).toBe('application/json');
      expect(JSON.parse(await bodyText(res))).toEqual({ error: 'boom' });
      expect(results).toEqual([]);
    }
  });

  it('a transport failure is a TransportError (502, nothing written)', async () => {
    const dead = await new FakeUpstream().start();
    const url = dead.url;
    await dead.stop();
    const client = new PooledSideCallClient(url, { maxIdleConns: 1, idleTimeoutMs: 100 });
    try {
      await expect(decode({}, deps({ gateway: client })).execute(makeCtx({ body: { model: 'm' }, tokenIds: [1] }))).rejects.toBeInstanceOf(
        TransportError,
      );
    } finally {
      await client.close();
    }
  });

  it('ceiling: a buffered answer above its reservation aborts (error_ceiling), reservation released', async () => {
    const frames = Array.from({ length: 100 }, () => ({ choices: [{ index: 0, token_ids: Array.from({ length: 10 }, (_, i) => i) }] }));
    gateway.respond = () => ({ headers: SSE_HEADERS, body: sse(frames) });
    const ctx = makeCtx({ path: '/inference/v1/generate', body: { model: 'm', sampling_params: { max_tokens: 1 } } });
    await expect(decode().execute(ctx)).rejects.toThrow('force-stream: buffered response exceeded its reserved budget');
    expect(results).toEqual(['error_ceiling']);
    expect(reserved).toBe(0);
  });

  it('ceiling: one SSE line longer than the reservation aborts too', async () => {
    gateway.respond = () => ({
      headers: SSE_HEADERS,
      body: sse([{ choices: [{ index: 0, token_ids: Array.from({ length: 3000 }, () => 1234) }] }]),
    });
    const ctx = makeCtx({ path: '/inference/v1/generate', body: { model: 'm', sampling_params: { max_tokens: 10 } } });
    await expect(decode().execute(ctx)).rejects.toThrow(/SSE line exceeds 2464 bytes/);
    expect(results).toEqual(['error_ceiling']);
  });

  it('a malformed frame before anything is written fails the request (502 class), not counted as ceiling', async () => {
    gateway.respond = () => ({ headers: SSE_HEADERS, body: 'data: {oops\n\n' });
    await expect(decode().execute(makeCtx({ body: { model: 'm' }, tokenIds: [1] }))).rejects.toThrow(/force-stream: parse frame/);
    expect(results).toEqual([]);
  });

  it('incremental: a failure after the first fragment truncates the reply (as upstream)', async () => {
    gateway.respond = () => ({
      headers: SSE_HEADERS,
      body: sse([{ choices: [{ index: 0, delta: { content: 'partial' } }] }], 'data: {oops\n\n'),
    });
    const res = respond(await decode().execute(makeCtx({ body: { model: 'm' }, tokenIds: [1] })));
    expect(res.status).toBe(200);
    const text = await bodyText(res);
    expect(text).toContain('"content":"partial');
    expect(() => JSON.parse(text)).toThrow();
    expect(results).toEqual([]);
  });

  it('the client going away while the worker has not answered is a cancel, not a worker failure; the reservation is released', async () => {
    gateway.respond = async () => {
      await new Promise((r) => setTimeout(r, 300));
      return { headers: SSE_HEADERS, body: sse([{ request_id: 'x', choices: [{ index: 0, token_ids: [1] }] }]) };
    };
    const abort = new AbortController();
    const pending = decode().execute(
      makeCtx({ path: '/inference/v1/generate', body: { model: 'm', sampling_params: { max_tokens: 4 } }, signal: abort.signal }),
    );
    setTimeout(() => abort.abort(), 30);
    await expect(pending).rejects.toBeInstanceOf(CancelledError);
    expect(results).toEqual([]);
    expect(reserved).toBe(0);
  });

  it('50 concurrent buffered requests against a budget for two: every one forced or fallen back, gauge back to 0', async () => {
    gateway.respond = async () => {
      await new Promise((r) => setTimeout(r, 20));
      return { headers: SSE_HEADERS, body: sse([{ request_id: 'x', choices: [{ index: 0, token_ids: [1], finish_reason: 'length' }] }]) };
    };
    const step = decode({ force_stream_buffer_size: '5000', force_stream_max_request_size: '5000' });
    const outcomes = await Promise.all(
      Array.from({ length: 50 }, () =>
        step.execute(makeCtx({ path: '/inference/v1/generate', body: { model: 'm', sampling_params: { max_tokens: 10 } } })),
      ),
    );
    const forced = results.filter((r) => r === 'forced').length;
    const fallback = results.filter((r) => r === 'fallback_budget').length;
    expect(forced + fallback).toBe(50);
    expect(forced).toBeGreaterThanOrEqual(2);
    expect(fallback).toBeGreaterThan(0);
    expect(outcomes.filter((o) => o !== undefined)).toHaveLength(forced);
    expect(reserved).toBe(0);
  });
});
