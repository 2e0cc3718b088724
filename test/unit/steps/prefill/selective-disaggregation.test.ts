/**
 * Selective disaggregation (issue #15 item 7): prefill's `min_prompt_tokens` and
 * `fallback_to_decode`, and what decode then sends. The gateway is a real local HTTP server.
 */
import { ConfigError } from '../../../../src/config/errors';
import { UpstreamError } from '../../../../src/pipeline/errors';
import type { StepParams } from '../../../../src/pipeline/step';
import { createDecodeStep } from '../../../../src/steps/decode';
import { createPrefillStep } from '../../../../src/steps/prefill';
import { isNoPrefillEndpointAnswer } from '../../../../src/steps/no-endpoint';
import { headersOf } from '../../../../src/pipeline/side-call';
import { makeCtx, useFakeUpstreams } from '../fake-upstream';

const up = useFakeUpstreams();

const prefill = (params: StepParams) => createPrefillStep({ use_openai_format: true, kv_connector: 'kv-nixl', ...params }, up.td.deps);
const decode = () => createDecodeStep({ use_openai_format: true, kv_connector: 'kv-nixl' }, up.td.deps);
const chat = (tokens: number) =>
  makeCtx({
    path: '/v1/chat/completions',
    body: { model: 'm', messages: [{ role: 'user', content: 'hi' }] },
    tokenIds: Array.from({ length: tokens }, (_, i) => i + 1),
  });

const NO_ENDPOINT = {
  status: 429,
  headers: { 'x-llm-d-request-dropped-reason': 'rejected-saturated', 'content-type': 'text/plain' },
  body: 'inference error: ResourceExhausted - no endpoints available for the given request',
};
const nixlAnswer = { kv_transfer_params: { remote_engine_id: 'e1', remote_block_ids: [[1]], remote_host: '10.0.0.9', remote_port: 5557 } };

describe('min_prompt_tokens', () => {
  it('a prompt below the threshold sends no prefill leg and decodes without kv_transfer_params', async () => {
    const ctx = chat(7);
    await prefill({ min_prompt_tokens: 8 }).execute(ctx);
    await decode().execute(ctx);
    expect(up.gateway.seen).toHaveLength(0);
    expect(ctx.disaggregation).toBe('aggregated_short_prompt');
    expect(ctx.body).not.toHaveProperty('kv_transfer_params');
    // The rendered tokens still save the decode worker a tokenisation.
    expect((ctx.body['tokens'] as { token_ids: number[] }).token_ids).toHaveLength(7);
  });

  it('a prompt at the threshold is disaggregated as before', async () => {
    up.gateway.respond = () => ({ body: nixlAnswer });
    const ctx = chat(8);
    await prefill({ min_prompt_tokens: 8 }).execute(ctx);
    await decode().execute(ctx);
    expect(up.gateway.seen).toHaveLength(1);
    expect(ctx.disaggregation).toBe('disaggregated');
    expect(ctx.body['kv_transfer_params']).toMatchObject({ remote_engine_id: 'e1', do_remote_prefill: true });
  });

  it('the default 0 always disaggregates, even an empty prompt', async () => {
    const ctx = chat(0);
    await prefill({}).execute(ctx);
    expect(up.gateway.seen).toHaveLength(1);
    expect(ctx.disaggregation).toBe('disaggregated');
  });

  it('without a render step (no token count) the request is disaggregated', async () => {
    const ctx = makeCtx({ path: '/v1/chat/completions', body: { model: 'm', messages: [] } });
    await prefill({ min_prompt_tokens: 1000 }).execute(ctx);
    expect(up.gateway.seen).toHaveLength(1);
  });

  it('generate requests get no extra_args transfer params when aggregated', async () => {
    const ctx = makeCtx({
      path: '/inference/v1/generate',
      body: { model: 'm', token_ids: [1, 2], sampling_params: { max_tokens: 3 } },
      tokenIds: [1, 2],
    });
    await prefill({ min_prompt_tokens: 3 }).execute(ctx);
    await decode().execute(ctx);
    expect(ctx.body['sampling_params']).toEqual({ max_tokens: 3 });
  });

  it.each([-1, 1.5, '10'])('rejects %p at start-up', (v) => {
    expect(() => prefill({ min_prompt_tokens: v })).toThrow(ConfigError);
  });
});

describe('fallback_to_decode', () => {
  it('the EPP saying there is no prefill endpoint serves the request aggregated', async () => {
    up.gateway.respond = () => NO_ENDPOINT;
    const ctx = chat(20);
    await prefill({ fallback_to_decode: true }).execute(ctx);
    await decode().execute(ctx);
    expect(up.gateway.seen).toHaveLength(1);
    expect(ctx.disaggregation).toBe('aggregated_fallback');
    expect(ctx.body).not.toHaveProperty('kv_transfer_params');
  });

  it('is off by default: the 429 is the client answer, as upstream', async () => {
    up.gateway.respond = () => NO_ENDPOINT;
    await expect(prefill({}).execute(chat(20))).rejects.toMatchObject({ status: 429 });
  });

  it('saturated existing pods (flow control) are not a missing pool: the 429 stands', async () => {
    up.gateway.respond = () => ({ ...NO_ENDPOINT, body: 'inference error: ResourceExhausted - queue at capacity' });
    await expect(prefill({ fallback_to_decode: true }).execute(chat(20))).rejects.toBeInstanceOf(UpstreamError);
  });

  it('a worker 429 without the EPP dropped-reason header is not a missing pool', async () => {
    up.gateway.respond = () => ({ status: 429, body: 'no endpoints available for the given request' });
    await expect(prefill({ fallback_to_decode: true }).execute(chat(20))).rejects.toMatchObject({ status: 429 });
  });
});

describe('isNoPrefillEndpointAnswer', () => {
  const res = (status: number, reason: string | undefined, body: string) => ({
    status,
    ...headersOf(reason === undefined ? {} : { 'x-llm-d-request-dropped-reason': reason }),
    body: Buffer.from(body),
  });
  it.each([
    [429, 'rejected-saturated', 'inference error: ResourceExhausted - no endpoints available for the given request', true],
    [429, 'rejected-saturated', '{"error":{"message":"no endpoints available for the given request","code":429}}', true],
    [503, 'rejected-no-endpoints', '{"error":{"message":"no endpoints available: pool empty"}}', true],
    [429, 'rejected-saturated', 'request rejected by flow control', false],
    [503, 'rejected-saturated', 'no endpoints available for the given request', false],
    [429, 'rejected-ttl-expired', 'no endpoints available for the given request', false],
    [429, undefined, 'no endpoints available for the given request', false],
    [200, 'rejected-saturated', 'no endpoints available for the given request', false],
  ])('%i %s %s -> %p', (status, reason, body, want) => {
    expect(isNoPrefillEndpointAnswer(res(status, reason, body))).toBe(want);
  });
});
