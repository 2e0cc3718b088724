/**
 * The multimodal cascade as the pipeline runs it: replace-media-urls -> render -> encode -> prefill
 * -> decode, against a local image host, a render fake (the simulator's renderer) and a gateway fake.
 * The image host is reached through the test-only `allowed_ip_ranges` exemption, on 127.0.0.1.
 */
import { renderChat } from '../../../../sim/render';
import { runPipeline } from '../../../../src/pipeline/executor';
import { StepRegistry } from '../../../../src/pipeline/registry';
import { classify } from '../../../../src/pipeline/errors';
import type { Step, StepParams } from '../../../../src/pipeline/step';
import { registerBuiltinSteps } from '../../../../src/steps';
import { ImageServer, PNG_BYTES } from '../media/image-server';
import { FakeUpstream, makeCtx, TestDeps } from '../fake-upstream';
import type { SeenRequest } from '../fake-upstream';

const images = new ImageServer();
const renderService = new FakeUpstream();
const gateway = new FakeUpstream();
let td: TestDeps;
const registry = registerBuiltinSteps(new StepRegistry());

beforeAll(async () => {
  await images.start();
  await renderService.start();
  await gateway.start();
  td = new TestDeps(gateway.url);
});
afterAll(async () => {
  await td.close();
  await Promise.all([images.stop(), renderService.stop(), gateway.stop()]);
});
beforeEach(() => {
  images.reset();
  renderService.reset();
  gateway.reset();
  renderService.respond = (req) => ({ body: renderChat(req.json) });
  gateway.respond = (req) => {
    if (req.headers['epp-profile'] === 'encode') {
      const hash = (req.json.features ?? req.json.tokens.features).mm_hashes.image[0] as string;
      return { body: { ec_transfer_params: { [hash]: { peer_host: `enc-${hash}`, peer_port: 5501 } } } };
    }
    return {
      body: { kv_transfer_params: { remote_engine_id: 'e1', remote_block_ids: [[1, 2]], remote_host: '10.0.0.9', remote_port: 5557 } },
    };
  };
});

function pipeline(pipelineParams: StepParams, mediaParams: StepParams = {}): Step[] {
  const steps: Array<[string, StepParams]> = [
    ['replace-media-urls', { allowed_ip_ranges: ['127.0.0.1/32'], ...mediaParams }],
    ['render', { address: renderService.url }],
    ['encode', { max_parallel: 4 }],
    ['prefill', {}],
    ['decode', {}],
  ];
  return steps.map(([type, own], i) => registry.build(type, { ...pipelineParams, ...own }, td.deps, i));
}

const legs = (profile: string): SeenRequest[] => gateway.seen.filter((r) => r.headers['epp-profile'] === profile);

function body() {
  return {
    model: 'llava',
    max_tokens: 20,
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'compare these' },
          { type: 'image_url', image_url: { url: `${images.url}/cat.png` } },
          { type: 'image_url', image_url: { url: 'data:image/jpeg;base64,/9j/AAAA' } },
        ],
      },
    ],
  };
}

describe('multimodal flow', () => {
  it('chat (OpenAI format): each image reaches encode; merged EC params reach prefill; decode carries the hashes', async () => {
    images.file('/cat.png', PNG_BYTES, 'image/png');
    const steps = pipeline({ kv_connector: 'kv-nixl', ec_connector: 'ec-nixl', use_openai_format: true });
    const ctx = makeCtx({ body: body(), requestId: 'flow-mm' });
    const outcome = await runPipeline(steps, ctx);
    expect(outcome.kind).toBe('completed');

    const pngUri = `data:image/png;base64,${PNG_BYTES.toString('base64')}`;
    // Render saw the inlined images.
    const rendered = renderService.seen[0]!.json.messages[0].content.map((p: any) => p.image_url?.url).filter(Boolean);
    expect(rendered).toEqual([pngUri, 'data:image/jpeg;base64,/9j/AAAA']);
    const hashes = ctx.multimodalEntries.map((e) => e.hash);
    expect(hashes).toHaveLength(2);

    const encodes = legs('encode');
    expect(encodes).toHaveLength(2);
    expect(encodes.every((r) => r.path === '/v1/chat/completions' && r.headers['x-request-id'] === 'flow-mm')).toBe(true);
    const urlByHash = Object.fromEntries(
      encodes.map((r) => [r.json.tokens.features.mm_hashes.image[0], r.json.messages[0].content[0].image_url.url]),
    );
    expect(urlByHash).toEqual({ [hashes[0]!]: pngUri, [hashes[1]!]: 'data:image/jpeg;base64,/9j/AAAA' });

    const prefill = legs('prefill');
    expect(prefill).toHaveLength(1);
    expect(prefill[0]!.json.ec_transfer_params).toEqual({
      [hashes[0]!]: { peer_host: `enc-${hashes[0]}`, peer_port: 5501 },
      [hashes[1]!]: { peer_host: `enc-${hashes[1]}`, peer_port: 5501 },
    });
    expect(prefill[0]!.json.tokens.features.mm_hashes.image).toEqual(hashes);
    expect(prefill[0]!.json.max_tokens).toBe(1);

    // Decode: the client request rewritten for Envoy to forward.
    const parts = (ctx.body['messages'] as any)[0].content;
    expect([parts[1].uuid, parts[2].uuid]).toEqual(hashes);
    expect(ctx.body['kv_transfer_params']).toMatchObject({ do_remote_decode: false, do_remote_prefill: true, remote_engine_id: 'e1' });
    expect(ctx.body).not.toHaveProperty('ec_transfer_params');
    expect(ctx.body['max_tokens']).toBe(20);
  });

  it('tokens-in (use_openai_format: false): encode and prefill post generate bodies with kwargs_data, null for cache hits', async () => {
    images.file('/cat.png', PNG_BYTES, 'image/png');
    // The render service reports the second image as an encoder-cache hit (kwargs null).
    renderService.respond = (req) => {
      const r = renderChat(req.json);
      r.features!.kwargs_data.image[1] = null as unknown as string;
      return { body: r };
    };
    const steps = pipeline({ kv_connector: 'kv-shared-storage', ec_connector: 'ec-nixl', use_openai_format: false });
    const ctx = makeCtx({ body: body(), requestId: 'flow-ti' });
    const outcome = await runPipeline(steps, ctx);
    expect(outcome.kind).toBe('completed');
    const hashes = ctx.multimodalEntries.map((e) => e.hash!);

    const encodes = legs('encode');
    expect(encodes.map((r) => r.path)).toEqual(['/inference/v1/generate', '/inference/v1/generate']);
    const kwargsByHash = Object.fromEntries(encodes.map((r) => [r.json.features.mm_hashes.image[0], r.json.features.kwargs_data.image[0]]));
    expect(kwargsByHash[hashes[0]!]).toEqual(expect.any(String));
    expect(kwargsByHash[hashes[1]!]).toBeNull();
    for (const r of encodes) {
      expect(r.json.token_ids[0]).toBe(ctx.tokenIds![0]);
      expect(r.json).not.toHaveProperty('messages');
      expect(r.json.sampling_params).toEqual({ max_tokens: 1 });
    }

    const prefill = legs('prefill')[0]!;
    expect(prefill.path).toBe('/inference/v1/generate');
    expect(prefill.json.token_ids).toEqual(ctx.tokenIds);
    expect(prefill.json.features.kwargs_data.image).toEqual([expect.any(String), null]);
    expect(prefill.json.sampling_params.extra_args).toEqual({
      kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false },
      ec_transfer_params: Object.fromEntries(hashes.map((h) => [h, { peer_host: `enc-${h}`, peer_port: 5501 }])),
    });
    expect(prefill.json).not.toHaveProperty('kv_transfer_params');
    expect(prefill.json).not.toHaveProperty('ec_transfer_params');

    // Decode keeps the chat path but the generate shape, as upstream.
    expect(ctx.body['sampling_params']).toEqual({
      extra_args: { kv_transfer_params: { do_remote_decode: false, do_remote_prefill: true } },
    });
    expect(ctx.body).not.toHaveProperty('tokens');
  });

  it('a failed download stops the cascade before render with a 502; a refused one with a 400', async () => {
    images.status('/gone.png', 404);
    const steps = pipeline({ ec_connector: 'ec-nixl' });
    const missing = await runPipeline(
      steps,
      makeCtx({
        body: { model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: `${images.url}/gone.png` } }] }] },
      }),
    );
    expect(missing).toMatchObject({ kind: 'failed', step: 'replace-media-urls' });
    expect(classify((missing as { error: unknown }).error, 'r').status).toBe(502);

    const refused = await runPipeline(
      steps,
      makeCtx({
        body: { model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://[::1]:1/x.png' } }] }] },
      }),
    );
    expect(classify((refused as { error: unknown }).error, 'r').status).toBe(400);
    expect(renderService.seen).toEqual([]);
    expect(gateway.seen).toEqual([]);
  });

  it('conflicting EC descriptors from two encoders stop the request before prefill (502)', async () => {
    gateway.respond = (req) => {
      if (req.headers['epp-profile'] === 'encode')
        return { body: { ec_transfer_params: { same: { peer_host: req.json.messages[0].content[0].image_url.url.slice(0, 20) } } } };
      return { body: {} };
    };
    const steps = pipeline({ ec_connector: 'ec-nixl' });
    const outcome = await runPipeline(
      steps,
      makeCtx({
        body: {
          ...body(),
          messages: [
            {
              role: 'user',
              content: [body().messages[0]!.content[2]!, { type: 'image_url', image_url: { url: 'data:image/png;base64,QQ' } }],
            },
          ],
        },
      }),
    );
    expect(outcome).toMatchObject({ kind: 'failed', step: 'prefill' });
    expect(classify((outcome as { error: unknown }).error, 'r').status).toBe(502);
    expect(legs('prefill')).toEqual([]);
  });
});
