import { ConfigError } from '../../../../src/config/errors';
import type { StepDeps, StepParams } from '../../../../src/pipeline/step';
import { createDecodeStep } from '../../../../src/steps/decode';
import { chatBodyWithImages, entry, makeCtx, useFakeUpstreams } from '../fake-upstream';

const up = useFakeUpstreams();
const { gateway } = up;

function decode(params: StepParams = {}) {
  return createDecodeStep({ use_openai_format: true, ...params }, up.td.deps);
}

const prefillKv = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: 'e1',
  remote_block_ids: [[1]],
  remote_host: '10.0.0.9',
  remote_port: 5557,
  tp_size: 2,
};

describe('decode: chat', () => {
  it('rewrites the client body in place and leaves the forward headers; no call is made', async () => {
    const body = chatBodyWithImages(1, { stream: false, max_tokens: 50, min_tokens: 3 });
    const image = (body['messages'] as any)[0].content[1];
    const ctx = makeCtx({
      body,
      requestId: 'rid-9',
      tokenIds: [1, 2, 3, 4, 5],
      entries: [entry(0, 'hash-a', 1, 3)],
      kvTransferParams: prefillKv,
    });
    await decode({ kv_connector: 'kv-nixl' }).execute(ctx);

    expect(ctx.body).toBe(body);
    expect(ctx.decode).toEqual({ headers: { 'epp-profile': 'decode', 'x-request-id': 'rid-9', 'content-type': 'application/json' } });
    expect(body).toEqual({
      model: 'm',
      stream: false,
      max_tokens: 50,
      min_tokens: 3,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'describe' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAA0' }, uuid: 'hash-a' },
          ],
        },
      ],
      kv_transfer_params: { ...prefillKv, do_remote_decode: false, do_remote_prefill: true },
      tokens: {
        token_ids: [1, 2, 3, 4, 5],
        features: { mm_hashes: { image: ['hash-a'] }, mm_placeholders: { image: [{ offset: 1, length: 3 }] } },
      },
    });
    expect(image.uuid).toBe('hash-a');
    expect(gateway.seen).toHaveLength(0);
  });

  it('keeps stream:true and stream_options for a streaming client', async () => {
    const ctx = makeCtx({ body: { model: 'm', stream: true, stream_options: { include_usage: true } }, tokenIds: [1] });
    await decode().execute(ctx);
    expect(ctx.body['stream']).toBe(true);
    expect(ctx.body['stream_options']).toEqual({ include_usage: true });
  });

  it('sends tokens.token_ids null without render, and no features without images (Q2)', async () => {
    const ctx = makeCtx();
    await decode().execute(ctx);
    expect(JSON.stringify(ctx.body['tokens'])).toBe('{"token_ids":null}');
  });

  it('overwrites client uuids in order and leaves image parts beyond the entries alone', async () => {
    const body = {
      messages: [
        'not-an-object',
        { role: 'system', content: 'text only' },
        { role: 'user', content: [{ type: 'image_url', image_url: { url: 'a' }, uuid: 'client-1' }, 'junk', { type: 'text', text: 't' }] },
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: 'b' } },
            { type: 'image_url', image_url: { url: 'c' }, uuid: 'keep' },
          ],
        },
      ],
    };
    const ctx = makeCtx({ body, entries: [entry(0, 'h0', 0, 1), entry(1, 'h1', 1, 1)] });
    await decode().execute(ctx);
    expect((body.messages[2] as any).content[0].uuid).toBe('h0');
    expect((body.messages[3] as any).content[0].uuid).toBe('h1');
    expect((body.messages[3] as any).content[1].uuid).toBe('keep');
  });

  it('injects an empty uuid when render did not run', async () => {
    const body = chatBodyWithImages(1);
    const ctx = makeCtx({ body, entries: [{ index: 0, base64Data: 'AAA' }] });
    await decode().execute(ctx);
    expect((body['messages'] as any)[0].content[1].uuid).toBe('');
  });

  it('never puts ec_transfer_params on the decode body', async () => {
    const ctx = makeCtx({ tokenIds: [1], entries: [entry(0, 'h', 0, 1)], ecTransferParams: [{ h: { peer_host: 'x' } }] });
    await decode().execute(ctx);
    expect(JSON.stringify(ctx.body)).not.toContain('ec_transfer_params');
  });

  it('shapes a chat request as generate when use_openai_format=false (Q1)', async () => {
    const body = chatBodyWithImages(1, { max_tokens: 5, min_tokens: 3 });
    const ctx = makeCtx({ body, tokenIds: [1, 2], entries: [entry(0, 'hash-a', 0, 1)] });
    await decode({ use_openai_format: false }).execute(ctx);
    expect(body).not.toHaveProperty('tokens');
    expect(body).not.toHaveProperty('kv_transfer_params');
    expect(body['sampling_params']).toEqual({ extra_args: { kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true } } });
    expect(body['max_tokens']).toBe(5);
    expect((body['messages'] as any)[0].content[1].uuid).toBe('hash-a');
    expect(ctx.decode!.headers['epp-profile']).toBe('decode');
  });
});

describe('decode: completions', () => {
  it('passes the prompt through when nothing was rendered', async () => {
    const ctx = makeCtx({ path: '/v1/completions', body: { model: 'm', prompt: 'Hello', max_tokens: 7 } });
    await decode().execute(ctx);
    expect(ctx.body).toEqual({
      model: 'm',
      prompt: 'Hello',
      max_tokens: 7,
      kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true },
    });
  });

  it('sends the rendered ids as prompt, with top-level kv; use_openai_format does not matter', async () => {
    for (const use_openai_format of [true, false]) {
      const ctx = makeCtx({ path: '/v1/completions', body: { prompt: 'Hello' }, tokenIds: [4, 5] });
      await decode({ use_openai_format }).execute(ctx);
      expect(ctx.body).toEqual({ prompt: [4, 5], kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true } });
    }
  });
});

describe('decode: generate', () => {
  it('nests kv in sampling_params.extra_args and keeps everything else the client sent (Q3)', async () => {
    const body = {
      model: 'm',
      token_ids: [1, 2, 3],
      features: { mm_hashes: { image: ['h'] }, mm_placeholders: { image: [{ offset: 0, length: 1 }] }, kwargs_data: { image: ['KW'] } },
      sampling_params: { max_tokens: 50, extra_args: { client: 1 } },
      stream: true,
    };
    const ctx = makeCtx({ path: '/inference/v1/generate', body, tokenIds: [1, 2, 3], kvTransferParams: { block_id: 42 } });
    await decode({ kv_connector: 'kv-nixl' }).execute(ctx);
    expect(body).toEqual({
      model: 'm',
      token_ids: [1, 2, 3],
      features: { mm_hashes: { image: ['h'] }, mm_placeholders: { image: [{ offset: 0, length: 1 }] }, kwargs_data: { image: ['KW'] } },
      sampling_params: {
        max_tokens: 50,
        extra_args: { client: 1, kv_transfer_params: { block_id: 42, do_remote_decode: false, do_remote_prefill: true } },
      },
      stream: true,
    });
  });

  it('replaces sampling_params or extra_args that are not objects', async () => {
    const ctx = makeCtx({ path: '/inference/v1/generate', body: { token_ids: [1], sampling_params: 'greedy' } });
    await decode().execute(ctx);
    expect(ctx.body['sampling_params']).toEqual({
      extra_args: { kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true } },
    });
    const ctx2 = makeCtx({ path: '/inference/v1/generate', body: { token_ids: [1], sampling_params: { extra_args: [1] } } });
    await decode().execute(ctx2);
    expect(ctx2.body['sampling_params']).toEqual({
      extra_args: { kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true } },
    });
  });
});

/** A NIXL peer a client would like a worker to pull from. */
const spoofEc = { 'hash-a': { peer_host: '6.6.6.6', peer_port: 5501, nixl_agent_metadata_b64: 'AAAA' } };
const spoofKv = { remote_host: '6.6.6.6', remote_port: 1, do_remote_prefill: true };

describe('decode: a client never sets transfer params (hardening)', () => {
  it('chat: drops the client ec_transfer_params (top level and in extra_args); kv is only ours', async () => {
    const body = chatBodyWithImages(1, {
      ec_transfer_params: spoofEc,
      kv_transfer_params: spoofKv,
      sampling_params: { temperature: 0.5, extra_args: { ec_transfer_params: spoofEc, keep: 1 } },
    });
    // The coordinator's own EC params (from encode) belong to prefill; decode gets none (§3.6).
    const ctx = makeCtx({
      body,
      tokenIds: [1, 2],
      entries: [entry(0, 'hash-a', 1, 1)],
      kvTransferParams: prefillKv,
      ecTransferParams: [{ 'hash-a': { peer_host: 'enc' } }],
    });
    await decode({ kv_connector: 'kv-nixl' }).execute(ctx);
    expect(JSON.stringify(ctx.body)).not.toContain('ec_transfer_params');
    expect(JSON.stringify(ctx.body)).not.toContain('6.6.6.6');
    expect(ctx.body['kv_transfer_params']).toMatchObject({ remote_host: '10.0.0.9', do_remote_prefill: true });
    expect(ctx.body['sampling_params']).toEqual({ temperature: 0.5, extra_args: { keep: 1 } });
  });

  it('completions: drops the client ec_transfer_params', async () => {
    const ctx = makeCtx({ path: '/v1/completions', body: { prompt: 'p', ec_transfer_params: spoofEc, kv_transfer_params: spoofKv } });
    await decode().execute(ctx);
    expect(ctx.body).toEqual({ prompt: 'p', kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true } });
  });

  it.each([
    ['/inference/v1/generate', true],
    ['/v1/chat/completions', false],
  ])(
    'generate shape (%s, use_openai_format=%s): drops client transfer params at the top level and in extra_args, keeps the rest',
    async (path, use_openai_format) => {
      const body = {
        token_ids: [1],
        ec_transfer_params: spoofEc,
        kv_transfer_params: spoofKv,
        sampling_params: { max_tokens: 9, extra_args: { ec_transfer_params: spoofEc, kv_transfer_params: spoofKv, keep: 1 } },
      };
      const ctx = makeCtx({ path, body, tokenIds: [1], ecTransferParams: [{ 'hash-a': { peer_host: 'enc' } }] });
      await decode({ use_openai_format }).execute(ctx);
      expect(ctx.body).toEqual({
        token_ids: [1],
        sampling_params: {
          max_tokens: 9,
          extra_args: { keep: 1, kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true } },
        },
      });
    },
  );
});

describe('decode: connectors and params', () => {
  it('kv-nixl: prefill answer fields plus flipped flags', async () => {
    const ctx = makeCtx({ kvTransferParams: { block_id: 'b', peer_host: 'p', do_remote_prefill: false } });
    await decode({ kv_connector: 'kv-nixl' }).execute(ctx);
    expect(ctx.body['kv_transfer_params']).toEqual({ block_id: 'b', peer_host: 'p', do_remote_decode: false, do_remote_prefill: true });
  });

  it('kv-shared-storage: flags only, the prefill answer is ignored', async () => {
    const ctx = makeCtx({ kvTransferParams: { ignored: true } });
    await decode({ kv_connector: 'kv-shared-storage' }).execute(ctx);
    expect(ctx.body['kv_transfer_params']).toEqual({ do_remote_decode: false, do_remote_prefill: true });
  });

  it('kv-sglang: echoes the prefill answer', async () => {
    const ctx = makeCtx({ kvTransferParams: { bootstrap_host: 'h', bootstrap_port: 8998, bootstrap_room: 'r' } });
    await decode({ kv_connector: 'kv-sglang' }).execute(ctx);
    expect(ctx.body['kv_transfer_params']).toEqual({
      bootstrap_host: 'h',
      bootstrap_port: 8998,
      bootstrap_room: 'r',
      do_remote_decode: false,
      do_remote_prefill: true,
    });
  });

  it('rejects an unknown connector, a bad use_openai_format and a missing gateway', () => {
    expect(() => decode({ kv_connector: 'kv-bogus' })).toThrow('decode: unknown kv_connector: "kv-bogus"');
    expect(() => decode({ use_openai_format: 'false' })).toThrow(ConfigError);
    const deps: StepDeps = { ...up.td.deps, gateway: undefined };
    expect(() => createDecodeStep({}, deps)).toThrow(ConfigError);
  });

  it('defaults use_openai_format to true', async () => {
    const ctx = makeCtx({ tokenIds: [1] });
    await createDecodeStep({}, up.td.deps).execute(ctx);
    expect(ctx.body['tokens']).toEqual({ token_ids: [1] });
  });
});
