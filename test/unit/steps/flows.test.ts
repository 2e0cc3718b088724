/** Steps chained as a pipeline would run them, against real local HTTP fakes (reference §9.12 flows). */
import { nixlEc } from '../../../src/connectors/ec';
import { StepRegistry } from '../../../src/pipeline/registry';
import { runPipeline } from '../../../src/pipeline/executor';
import type { Step, StepParams } from '../../../src/pipeline/step';
import { BUILTIN_STEPS, registerBuiltinSteps } from '../../../src/steps';
import { chatBodyWithImages, makeCtx, useFakeUpstreams } from './fake-upstream';

const up = useFakeUpstreams();
const { renderService, gateway } = up;
const registry = registerBuiltinSteps(new StepRegistry());

/** Builds steps as the config builder does: pipeline-level params injected into each step. */
function pipeline(pipelineParams: StepParams, ...steps: Array<[string, StepParams?]>): Step[] {
  return steps.map(([type, own], i) => registry.build(type, { ...pipelineParams, ...(own ?? {}) }, up.td.deps, i));
}

describe('registerBuiltinSteps', () => {
  it('registers render, prefill and decode', () => {
    expect(registry.types()).toEqual(expect.arrayContaining(['render', 'prefill', 'decode']));
    expect(BUILTIN_STEPS.map(([t]) => t)).toEqual(registry.types());
  });
});

describe('flows', () => {
  it('chat, default format: render, then prefill and decode legs on the chat path, KV flowing from prefill to decode', async () => {
    renderService.respond = () => ({
      body: {
        token_ids: [1, 9, 9, 9, 2],
        features: {
          mm_hashes: { image: ['hash-a'] },
          mm_placeholders: { image: [{ offset: 1, length: 3 }] },
          kwargs_data: { image: ['KW'] },
        },
      },
    });
    gateway.respond = () => ({ body: { kv_transfer_params: { block_id: 'blk-1', peer_host: '10.1.1.1', do_remote_decode: true } } });
    const steps = pipeline(
      { kv_connector: 'kv-nixl', ec_connector: 'ec-nixl', use_openai_format: true },
      ['render', { address: renderService.url }],
      ['prefill'],
      ['decode'],
    );
    const ctx = makeCtx({
      body: chatBodyWithImages(1, { max_tokens: 20 }),
      entries: [{ index: 0, base64Data: 'AAA0', contentType: 'image/png' }],
      requestId: 'flow-1',
    });
    ctx.ecTransferParams = null;
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': { peer_host: 'enc', peer_port: 1 } });

    const outcome = await runPipeline(steps, ctx);
    expect(outcome.kind).toBe('completed');
    expect(renderService.seen.map((r) => r.path)).toEqual(['/v1/chat/completions/render']);
    expect(gateway.seen.map((r) => [r.path, r.headers['epp-profile'], r.headers['x-request-id']])).toEqual([
      ['/v1/chat/completions', 'prefill', 'flow-1'],
    ]);
    const pre = gateway.seen[0]!.json;
    expect(pre.tokens).toEqual({
      token_ids: [1, 9, 9, 9, 2],
      features: { mm_hashes: { image: ['hash-a'] }, mm_placeholders: { image: [{ offset: 1, length: 3 }] } },
    });
    expect(pre.ec_transfer_params).toEqual({ 'hash-a': { peer_host: 'enc', peer_port: 1 } });

    // Decode: the rewritten client request, left for Envoy to forward on the same path.
    expect(ctx.decode!.headers).toEqual({ 'epp-profile': 'decode', 'x-request-id': 'flow-1', 'content-type': 'application/json' });
    expect(ctx.body['kv_transfer_params']).toEqual({
      block_id: 'blk-1',
      peer_host: '10.1.1.1',
      do_remote_decode: false,
      do_remote_prefill: true,
    });
    expect(ctx.body['max_tokens']).toBe(20);
    expect(ctx.body).not.toHaveProperty('ec_transfer_params');
    expect((ctx.body['messages'] as any)[0].content[1].uuid).toBe('hash-a');
  });

  it('completions with use_openai_format=false: every leg stays on /v1/completions', async () => {
    renderService.respond = () => ({ body: [{ token_ids: [3, 4, 5] }] });
    const steps = pipeline({ use_openai_format: false }, ['render', { address: renderService.url }], ['prefill'], ['decode']);
    const ctx = makeCtx({ path: '/v1/completions', body: { model: 'm', prompt: 'Hello', max_tokens: 9 } });
    await runPipeline(steps, ctx);
    expect(renderService.seen[0]!.path).toBe('/v1/completions/render');
    expect(gateway.seen.map((r) => r.path)).toEqual(['/v1/completions']);
    expect(gateway.seen[0]!.json.prompt).toEqual([3, 4, 5]);
    expect(ctx.body).toEqual({
      model: 'm',
      prompt: [3, 4, 5],
      max_tokens: 9,
      kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true },
    });
  });

  it('generate: render validates the client features; prefill rebuilds them; decode keeps the client body', async () => {
    gateway.respond = () => ({ body: { kv_transfer_params: { block_id: 7 } } });
    const steps = pipeline({ kv_connector: 'kv-nixl', ec_connector: 'ec-nixl' }, ['render'], ['prefill'], ['decode']);
    const features = { mm_hashes: { image: ['h1'] }, mm_placeholders: { image: [{ offset: 1, length: 3 }] } };
    const body = { model: 'm', token_ids: [1, 5, 5, 5, 2], features, sampling_params: { max_tokens: 30 } };
    const ctx = makeCtx({ path: '/inference/v1/generate', body });
    const outcome = await runPipeline(steps, ctx);
    expect(outcome.kind).toBe('completed');
    expect(gateway.seen[0]!.path).toBe('/inference/v1/generate');
    expect(gateway.seen[0]!.json.features).toEqual({ ...features, kwargs_data: { image: [null] } });
    expect(gateway.seen[0]!.json.sampling_params.max_tokens).toBe(1);
    expect(gateway.seen[0]!.json.sampling_params.extra_args).not.toHaveProperty('ec_transfer_params');
    expect(ctx.body).toEqual({
      model: 'm',
      token_ids: [1, 5, 5, 5, 2],
      features,
      sampling_params: {
        max_tokens: 30,
        extra_args: { kv_transfer_params: { block_id: 7, do_remote_decode: false, do_remote_prefill: true } },
      },
    });
  });

  it('encode results reaching prefill: only the hashes encoders reported are forwarded', async () => {
    const steps = pipeline({ ec_connector: 'ec-nixl', use_openai_format: false }, ['prefill'], ['decode']);
    const ctx = makeCtx({
      body: chatBodyWithImages(2),
      tokenIds: [1, 8, 8, 8, 8, 2],
      entries: [
        { index: 0, hash: 'hash-1', kwargsData: 'k1', placeholder: { offset: 1, length: 2 } },
        { index: 1, hash: 'hash-2', kwargsData: 'k2', placeholder: { offset: 3, length: 2 } },
      ],
    });
    nixlEc.mergeEncodeResponse(ctx, { 'hash-1': { peer_host: 'a' } });
    nixlEc.mergeEncodeResponse(ctx, null);
    await runPipeline(steps, ctx);
    const pre = gateway.seen[0]!.json;
    expect(pre.features.kwargs_data).toEqual({ image: ['k1', 'k2'] });
    expect(pre.sampling_params.extra_args.ec_transfer_params).toEqual({ 'hash-1': { peer_host: 'a' } });
    expect(JSON.stringify(ctx.body)).not.toContain('ec_transfer_params');
  });

  it('a failed prefill stops the pipeline before decode', async () => {
    gateway.respond = () => ({ status: 503, body: 'busy' });
    const steps = pipeline({}, ['prefill'], ['decode']);
    const ctx = makeCtx();
    const outcome = await runPipeline(steps, ctx);
    expect(outcome).toMatchObject({ kind: 'failed', step: 'prefill' });
    expect(ctx.decode).toBeNull();
  });
});
