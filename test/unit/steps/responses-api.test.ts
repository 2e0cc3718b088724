/**
 * `POST /v1/responses` through the pipeline (issue #15 item 2): the request
 * checks before the pipeline, and the render, encode, prefill, conditional-decode and decode wire.
 * Side calls reach real local HTTP servers.
 */
import { PipelineHandler } from '../../../src/pipeline/handler';
import type { RespondDecision } from '../../../src/pipeline/decision';
import type { JsonObject } from '../../../src/pipeline/context';
import { runPipeline } from '../../../src/pipeline/executor';
import { StepRegistry } from '../../../src/pipeline/registry';
import type { Step, StepParams } from '../../../src/pipeline/step';
import { silentLogger } from '../../../src/observability/logger';
import { registerBuiltinSteps } from '../../../src/steps';
import { buildEncodeBody } from '../../../src/steps/encode';
import { entry, makeCtx, useFakeUpstreams } from './fake-upstream';
import { mediaStep } from './media/helpers';

const up = useFakeUpstreams();
const { renderService, gateway } = up;
const registry = registerBuiltinSteps(new StepRegistry());
const PATH = '/v1/responses';

function pipeline(...steps: Array<[string, StepParams?]>): Step[] {
  return steps.map(([type, own], i) =>
    registry.build(type, { use_openai_format: true, kv_connector: 'kv-nixl', ...(own ?? {}) }, up.td.deps, i),
  );
}

const IMG = 'data:image/png;base64,iVBORw0KGgo=';
const withImage = (extra: JsonObject = {}): JsonObject => ({
  model: 'm',
  input: [
    {
      role: 'user',
      content: [
        { type: 'input_text', text: 'describe' },
        { type: 'input_image', image_url: IMG, detail: 'low' },
      ],
    },
  ],
  max_output_tokens: 50,
  stream: true,
  stream_options: { include_usage: true },
  store: true,
  min_tokens: 3,
  ...extra,
});
const renderAnswer = {
  token_ids: [1, 5, 6, 32000, 32000, 7],
  features: { mm_hashes: { image: ['h0'] }, mm_placeholders: { image: [{ offset: 3, length: 2 }] }, kwargs_data: { image: ['kw0'] } },
};

describe('Responses: requests refused before the pipeline', () => {
  let handler: PipelineHandler;
  beforeAll(() => {
    handler = new PipelineHandler({ steps: pipeline(['decode']), maxBodyBytes: 1 << 20, log: silentLogger() });
  });
  const run = async (body: unknown) => {
    const ex = handler.begin({ method: 'POST', path: PATH, headers: {} });
    expect(ex).not.toBeNull();
    return ex!.complete(Buffer.from(JSON.stringify(body)));
  };
  const message = (d: unknown) => JSON.parse(((d as RespondDecision).body as Buffer).toString()).error.message as string;

  it.each([
    [{ previous_response_id: 'resp_1' }, 'field "previous_response_id" is not supported by the router'],
    [{ conversation: { id: 'c' } }, 'field "conversation" is not supported by the router'],
    [{ background: true }, 'field "background" is not supported by the router'],
    [
      { input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-1' }] }] },
      'field "file_id" is not supported by the router',
    ],
    [{ input: [{ type: 'input_file', file_id: 'file-1' }] }, 'field "file_id" is not supported by the router'],
    [{ input: 42 }, 'input must be a string or an array'],
  ])('%j -> 400 %s', async (extra, msg) => {
    const d = await run({ model: 'm', input: 'hi', ...extra });
    expect(d).toMatchObject({ kind: 'respond', status: 400 });
    expect(message(d)).toContain(`${msg} (request_id: `);
  });

  it.each([{ background: false }, { background: null, previous_response_id: null, store: true }])('%j is accepted', async (extra) => {
    const d = await run({ model: 'm', input: 'hi', ...extra });
    expect(d.kind).toBe('forward');
  });

  it('a chat request with a stray previous_response_id is not checked (detection is by path)', async () => {
    const ex = handler.begin({ method: 'POST', path: '/v1/chat/completions', headers: {} })!;
    const d = await ex.complete(
      Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], previous_response_id: 'x' })),
    );
    expect(d.kind).toBe('forward');
  });
});

describe('Responses: the legs', () => {
  it('render -> prefill -> decode: paths and bodies of the Responses wire', async () => {
    renderService.respond = () => ({ body: renderAnswer });
    gateway.respond = () => ({
      body: {
        id: 'resp-x',
        kv_transfer_params: { remote_engine_id: 'e1', remote_block_ids: [[1]], remote_host: '10.0.0.9', remote_port: 5557 },
      },
    });
    const ctx = makeCtx({ path: PATH, body: withImage(), entries: [{ index: 0, base64Data: 'iVBORw0KGgo=', contentType: 'image/png' }] });
    const outcome = await runPipeline(pipeline(['render', { address: renderService.url }], ['prefill'], ['decode']), ctx);
    expect(outcome.kind).toBe('completed');

    expect(renderService.seen.map((r) => r.path)).toEqual(['/v1/responses/render']);
    expect(ctx.tokenIds).toEqual(renderAnswer.token_ids);

    const prefill = gateway.seen[0]!;
    expect(prefill.path).toBe('/v1/responses');
    expect(prefill.headers['epp-profile']).toBe('prefill');
    const pj = prefill.json as JsonObject;
    expect(pj).toMatchObject({
      model: 'm',
      max_output_tokens: 1,
      stream: false,
      store: false,
      kv_transfer_params: { do_remote_decode: true },
    });
    expect(pj).not.toHaveProperty('stream_options');
    expect(pj).not.toHaveProperty('min_tokens');
    expect(pj).not.toHaveProperty('tokens');
    expect(pj['input']).toEqual(withImage()['input']);

    const d = ctx.body;
    expect(d['max_output_tokens']).toBe(50);
    expect(d['stream']).toBe(true);
    expect(d['store']).toBe(true);
    expect(d['kv_transfer_params']).toMatchObject({ remote_engine_id: 'e1', do_remote_prefill: true });
    expect(d).not.toHaveProperty('tokens');
    const parts = (d['input'] as JsonObject[])[0]!['content'] as JsonObject[];
    expect(parts[1]).toEqual({ type: 'input_image', image_url: IMG, detail: 'low', uuid: 'h0' });
    expect(ctx.decode?.headers['epp-profile']).toBe('decode');
  });

  it('encode: one single-token Responses body per image, the client part verbatim', () => {
    const ctx = makeCtx({ path: PATH, body: withImage(), tokenIds: renderAnswer.token_ids, entries: [entry(0, 'h0', 3, 2)] });
    const part = ((ctx.body['input'] as JsonObject[])[0]!['content'] as JsonObject[])[1]!;
    expect(buildEncodeBody(ctx, ctx.multimodalEntries[0]!, 'responses', [part])).toEqual({
      model: 'm',
      input: [{ role: 'user', content: [{ type: 'input_image', image_url: IMG, detail: 'low' }] }],
      max_output_tokens: 1,
      store: false,
      stream: false,
    });
  });

  it('conditional-decode probes /v1/responses with the body unchanged', async () => {
    gateway.respond = () => ({ status: 412, body: {} });
    const body = withImage({ kv_transfer_params: { client: 'own' } });
    const ctx = makeCtx({ path: PATH, body });
    await runPipeline(pipeline(['conditional-decode']), ctx);
    const probe = gateway.seen[0]!;
    expect(probe.path).toBe('/v1/responses');
    expect(probe.headers['prefer']).toBe('if-available');
    const { kv_transfer_params: _, ...rest } = body;
    expect(probe.json).toEqual(rest);
  });

  it('with use_openai_format false, prefill collapses to generate', async () => {
    gateway.respond = () => ({ body: {} });
    const ctx = makeCtx({ path: PATH, body: { model: 'm', input: 'hi' }, tokenIds: [1, 2, 3] });
    await runPipeline([registry.build('prefill', { use_openai_format: false }, up.td.deps, 0)], ctx);
    expect(gateway.seen[0]!.path).toBe('/inference/v1/generate');
  });
});

describe('Responses: replace-media-urls', () => {
  it('finds input_image parts whose image_url is a string, keeping detail', async () => {
    const ctx = makeCtx({ path: PATH, body: withImage() });
    await mediaStep({}, {}).execute(ctx);
    expect(ctx.multimodalEntries).toHaveLength(1);
    expect(ctx.multimodalEntries[0]).toMatchObject({ contentType: 'image/png', base64Data: 'iVBORw0KGgo=' });
  });

  it('an input_image whose image_url is not a string is a 400', async () => {
    const ctx = makeCtx({
      path: PATH,
      body: { model: 'm', input: [{ role: 'user', content: [{ type: 'input_image', image_url: { url: IMG } }] }] },
    });
    await expect(mediaStep({}, {}).execute(ctx)).rejects.toThrow('input[0].content[0].image_url must be a string, got object');
  });

  it('chat-shaped image parts in a Responses request are not images of it', async () => {
    const ctx = makeCtx({
      path: PATH,
      body: { model: 'm', input: 'x', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: IMG } }] }] },
    });
    await mediaStep({}, {}).execute(ctx);
    expect(ctx.multimodalEntries).toHaveLength(0);
  });
});
