/**
 * Transfer params are the coordinator's alone (hardening): a client's `ec_transfer_params` or
 * `kv_transfer_params` would point a worker at a NIXL peer of its choosing. Prefill gets only the
 * EC params encode produced; decode (and the conditional-decode probe) get none (reference §3.6).
 */
import { StepRegistry } from '../../../../src/pipeline/registry';
import { runPipeline } from '../../../../src/pipeline/executor';
import type { Step, StepParams } from '../../../../src/pipeline/step';
import { registerBuiltinSteps } from '../../../../src/steps';
import { createConditionalDecodeStep } from '../../../../src/steps/conditional-decode';
import { dropTransferParams } from '../../../../src/steps/wire';
import { chatBodyWithImages, entry, makeCtx, useFakeUpstreams } from '../fake-upstream';

const up = useFakeUpstreams();
const { gateway } = up;
const registry = registerBuiltinSteps(new StepRegistry());

const SPOOF = { 'hash-a': { peer_host: '6.6.6.6', peer_port: 5501, nixl_agent_metadata_b64: 'QUFB' } };

function pipeline(pipelineParams: StepParams, ...types: string[]): Step[] {
  return types.map((type, i) => registry.build(type, { ...pipelineParams }, up.td.deps, i));
}

describe('dropTransferParams', () => {
  it('removes both fields at the top level and in sampling_params.extra_args, without touching the nested client objects', () => {
    const extra = { ec_transfer_params: SPOOF, kv_transfer_params: {}, seed: 3 };
    const sampling = { max_tokens: 5, extra_args: extra };
    const client = { model: 'm', ec_transfer_params: SPOOF, kv_transfer_params: {}, sampling_params: sampling };
    const copy = { ...client };
    dropTransferParams(copy);
    expect(copy).toEqual({ model: 'm', sampling_params: { max_tokens: 5, extra_args: { seed: 3 } } });
    // The shallow copy was cleaned; what the client sent is as it was.
    expect(client.sampling_params).toBe(sampling);
    expect(sampling.extra_args).toBe(extra);
    expect(extra).toHaveProperty('ec_transfer_params', SPOOF);
  });

  it('leaves bodies without them, and non-object sampling_params / extra_args, alone', () => {
    for (const body of [
      { a: 1 },
      { sampling_params: 'x' },
      { sampling_params: { extra_args: [1] } },
      { sampling_params: { extra_args: { seed: 1 } } },
    ]) {
      const before = JSON.stringify(body);
      const sampling = (body as Record<string, unknown>)['sampling_params'];
      dropTransferParams(body);
      expect(JSON.stringify(body)).toBe(before);
      expect((body as Record<string, unknown>)['sampling_params']).toBe(sampling);
    }
  });
});

describe('conditional-decode probe', () => {
  it.each([
    ['/v1/chat/completions', true],
    ['/v1/chat/completions', false],
    ['/v1/completions', true],
    ['/inference/v1/generate', true],
  ])(
    '%s (use_openai_format=%s): a client transfer param never reaches the decode worker; the client body is untouched',
    async (path, use_openai_format) => {
      gateway.respond = () => ({ status: 200, body: { choices: [] } });
      const body = {
        model: 'm',
        messages: [],
        prompt: 'p',
        token_ids: [1],
        ec_transfer_params: SPOOF,
        kv_transfer_params: { remote_host: '6.6.6.6', do_remote_prefill: true },
        sampling_params: { max_tokens: 4, extra_args: { ec_transfer_params: SPOOF, kv_transfer_params: { remote_host: '6.6.6.6' } } },
      };
      const sent = JSON.stringify(body);
      const ctx = makeCtx({ path, body });
      await createConditionalDecodeStep({ use_openai_format }, up.td.deps).execute(ctx);
      const probe = gateway.seen[0]!;
      expect(probe.headers['prefer']).toBe('if-available');
      expect(probe.raw).not.toContain('_transfer_params');
      expect(probe.raw).not.toContain('6.6.6.6');
      expect(probe.json).toMatchObject({ model: 'm', sampling_params: { max_tokens: 4, extra_args: {} } });
      expect(JSON.stringify(ctx.body)).toBe(sent);
    },
  );
});

describe('encode -> prefill -> decode with a client that sends its own ec_transfer_params', () => {
  it.each([true, false])(
    'use_openai_format=%s: prefill carries only what the encoders reported; decode carries none',
    async (use_openai_format) => {
      gateway.respond = (req) => {
        if (req.headers['epp-profile'] === 'encode')
          return { body: { ec_transfer_params: { 'hash-a': { peer_host: 'encoder-1', peer_port: 5501 } } } };
        return { body: { kv_transfer_params: { remote_host: 'prefill-1', remote_block_ids: [1] } } };
      };
      const steps = pipeline({ kv_connector: 'kv-nixl', ec_connector: 'ec-nixl', use_openai_format }, 'encode', 'prefill', 'decode');
      const body = chatBodyWithImages(1, {
        ec_transfer_params: SPOOF,
        sampling_params: { extra_args: { ec_transfer_params: SPOOF } },
      });
      const ctx = makeCtx({ body, tokenIds: [1, 9, 9, 2], entries: [entry(0, 'hash-a', 1, 2)] });
      ctx.ecTransferParams = null;

      const outcome = await runPipeline(steps, ctx);
      expect(outcome.kind).toBe('completed');
      expect(gateway.seen.map((r) => r.headers['epp-profile'])).toEqual(['encode', 'prefill']);
      for (const leg of gateway.seen) expect(leg.raw).not.toContain('6.6.6.6');

      const prefill = gateway.seen[1]!.json;
      const ours = { 'hash-a': { peer_host: 'encoder-1', peer_port: 5501 } };
      if (use_openai_format) expect(prefill.ec_transfer_params).toEqual(ours);
      else expect(prefill.sampling_params.extra_args.ec_transfer_params).toEqual(ours);

      // The forwarded decode request: KV params from prefill, no EC params of anyone's.
      const decode = JSON.stringify(ctx.body);
      expect(decode).not.toContain('ec_transfer_params');
      expect(decode).not.toContain('6.6.6.6');
      expect(decode).toContain('prefill-1');
    },
  );
});
