/**
 * render `responses_via`: a Responses request rendered at its own route (`native`), at the chat
 * route as the chat request it stands for (`chat`), or native first with a remembered fallback to
 * chat on a 404 (`auto`, the default). Against a real local HTTP render service.
 */
import { ConfigError } from '../../../../src/config/errors';
import { classify, UpstreamError } from '../../../../src/pipeline/errors';
import type { JsonObject } from '../../../../src/pipeline/context';
import type { Step, StepParams } from '../../../../src/pipeline/step';
import { ChatRouteMemo } from '../../../../src/steps/chat-route-memo';
import { createRenderStep, readRenderConfig } from '../../../../src/steps/render';
import { makeCtx, useFakeUpstreams, type SeenRequest } from '../fake-upstream';

const up = useFakeUpstreams();
const { renderService } = up;
const PATH = '/v1/responses';
const NATIVE = '/v1/responses/render';
const CHAT = '/v1/chat/completions/render';
const IMG = 'data:image/png;base64,iVBORw0KGgo=';

const render = (params: StepParams = {}): Step => createRenderStep({ address: renderService.url, ...params }, up.td.deps);

const answer = {
  token_ids: [1, 5, 6, 32000, 32000, 7],
  features: { mm_hashes: { image: ['h0'] }, mm_placeholders: { image: [{ offset: 3, length: 2 }] }, kwargs_data: { image: ['kw0'] } },
};
const body = (): JsonObject => ({
  model: 'm',
  instructions: 'be brief',
  input: [
    {
      role: 'user',
      content: [
        { type: 'input_text', text: 'describe' },
        { type: 'input_image', image_url: IMG },
      ],
    },
  ],
  max_output_tokens: 9,
  stream: true,
});
const ctxFor = (b: JsonObject = body()) =>
  makeCtx({ path: PATH, body: b, entries: [{ index: 0, base64Data: 'iVBORw0KGgo=', contentType: 'image/png' }] });

/** A render service without the Responses route, as llm-d-inference-sim and vLLM's render are. */
const withoutNative = (req: SeenRequest) =>
  req.path === NATIVE ? { status: 404, body: '404 page not found', headers: { 'content-type': 'text/plain' } } : { body: answer };

function expectRendered(ctx: ReturnType<typeof ctxFor>): void {
  expect(ctx.tokenIds).toEqual(answer.token_ids);
  expect(ctx.multimodalEntries[0]).toMatchObject({ hash: 'h0', kwargsData: 'kw0', placeholder: { offset: 3, length: 2 } });
}

const expectedChatBody = {
  model: 'm',
  messages: [
    { role: 'system', content: 'be brief' },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'describe' },
        { type: 'image_url', image_url: { url: IMG } },
      ],
    },
  ],
  max_tokens: 9,
};

describe('render responses_via', () => {
  it('defaults to auto; a value outside auto, chat, native is a config error naming the key', () => {
    expect(readRenderConfig({}).responsesVia).toBe('auto');
    expect(readRenderConfig({ responses_via: 'chat' }).responsesVia).toBe('chat');
    expect(() => readRenderConfig({ responses_via: 'tokens' })).toThrow(ConfigError);
    expect(() => readRenderConfig({ responses_via: 'tokens' })).toThrow(/render\.params\.responses_via/);
  });

  it('native: the client body at /v1/responses/render', async () => {
    renderService.respond = () => ({ body: answer });
    const ctx = ctxFor();
    await render({ responses_via: 'native' }).execute(ctx);
    expect(renderService.seen.map((r) => r.path)).toEqual([NATIVE]);
    expect(renderService.seen[0]!.json).toEqual(body());
    expectRendered(ctx);
  });

  it('native: a 404 is the answer (an UpstreamError 404), no fallback', async () => {
    renderService.respond = withoutNative;
    const err = await render({ responses_via: 'native' })
      .execute(ctxFor())
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamError);
    expect(classify(err, 'r').status).toBe(404);
    expect(renderService.seen.map((r) => r.path)).toEqual([NATIVE]);
  });

  it('chat: the mapped chat body at /v1/chat/completions/render; the client body is left as it came', async () => {
    renderService.respond = withoutNative;
    const ctx = ctxFor();
    await render({ responses_via: 'chat' }).execute(ctx);
    expect(renderService.seen.map((r) => r.path)).toEqual([CHAT]);
    expect(renderService.seen[0]!.json).toEqual(expectedChatBody);
    expectRendered(ctx);
    expect(ctx.body).toEqual(body());
  });

  it('auto: native when the route exists, every time', async () => {
    renderService.respond = () => ({ body: answer });
    const step = render();
    for (let i = 0; i < 2; i++) await step.execute(ctxFor());
    expect(renderService.seen.map((r) => r.path)).toEqual([NATIVE, NATIVE]);
  });

  it('auto: one 404, then chat for that request; the next request goes straight to chat', async () => {
    renderService.respond = withoutNative;
    const step = render();
    const first = ctxFor();
    await step.execute(first);
    expectRendered(first);
    expect(renderService.seen.map((r) => r.path)).toEqual([NATIVE, CHAT]);
    expect(renderService.seen[1]!.json).toEqual(expectedChatBody);
    const second = ctxFor();
    await step.execute(second);
    expectRendered(second);
    expect(renderService.seen.map((r) => r.path)).toEqual([NATIVE, CHAT, CHAT]);
  });

  it('auto: a native answer other than 200 or 404 is the answer; nothing is remembered', async () => {
    renderService.respond = (req) => (req.path === NATIVE ? { status: 400, body: { error: { message: 'bad input' } } } : { body: answer });
    const step = render();
    const err = await step.execute(ctxFor()).catch((e: unknown) => e);
    expect(classify(err, 'r').status).toBe(400);
    await step.execute(ctxFor()).catch(() => undefined);
    expect(renderService.seen.map((r) => r.path)).toEqual([NATIVE, NATIVE]);
  });

  it('auto: when the chat route fails too, its answer is the answer and native is tried again next time', async () => {
    // A 404 for an unknown model on both routes is not a missing route.
    renderService.respond = () => ({ status: 404, body: { error: { message: 'The model `m` does not exist.' } } });
    const step = render();
    const err = await step.execute(ctxFor()).catch((e: unknown) => e);
    expect(classify(err, 'r').status).toBe(404);
    renderService.respond = () => ({ body: answer });
    await step.execute(ctxFor());
    expect(renderService.seen.map((r) => r.path)).toEqual([NATIVE, CHAT, NATIVE]);
  });

  it('chat and completions requests are not affected by the setting', async () => {
    renderService.respond = () => ({ body: { token_ids: [1, 2] } });
    const ctx = makeCtx({ path: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'x' }] } });
    await render({ responses_via: 'native' }).execute(ctx);
    expect(renderService.seen.map((r) => r.path)).toEqual([CHAT]);
    expect(renderService.seen[0]!.json).toEqual({ model: 'm', messages: [{ role: 'user', content: 'x' }] });
  });
});

describe('ChatRouteMemo', () => {
  it('is bounded: past its capacity the oldest address is forgotten', () => {
    const memo = new ChatRouteMemo(2);
    memo.rememberChat('a');
    memo.rememberChat('b');
    memo.rememberChat('a');
    expect(memo.size).toBe(2);
    memo.rememberChat('c');
    expect(memo.size).toBe(2);
    expect([memo.usesChat('a'), memo.usesChat('b'), memo.usesChat('c')]).toEqual([false, true, true]);
  });
});
