/**
 * `render`: turns the prompt into token ids once, for every later leg.
 *
 * Chat and completions-string requests are tokenised by the render service at the step's own
 * `address`; a completions token array and a tokens-in generate request are validated locally.
 * A Responses request is rendered at `/v1/responses/render` or, as the chat request it stands for,
 * at `/v1/chat/completions/render` (`responses_via`): real render services have only the latter.
 */
import type { JsonObject, MultimodalEntry, RequestContext } from '../pipeline/context';
import { BadRequestError, UpstreamError, UpstreamInvalidError } from '../pipeline/errors';
import { ParamReader } from '../pipeline/params';
import type { Step, StepDeps, StepFactory, StepParams } from '../pipeline/step';
import type { SideCallClient, SideCallResponse } from '../pipeline/side-call';
import { ChatRouteMemo } from './chat-route-memo';
import {
  CHAT_COMPLETIONS_PATH,
  COMPLETIONS_PATH,
  CONTENT_TYPE_JSON,
  GENERATE_PATH,
  HEADER_CONTENT_TYPE,
  RESPONSES_PATH,
  decodeChatRenderResponse,
  decodeCompletionsRenderResponse,
  extractMultimodalEntries,
  extractTokenIds,
  isJsonObject,
  jsonTypeName,
  responsesAsChatRender,
  toTokenIds,
  validatePlaceholderBounds,
  validateSamplingParams,
} from './wire';

export const RENDER_STEP = 'render';

/** How a Responses request is rendered: its own route, the chat route, or the first that exists. */
export type ResponsesVia = 'chat' | 'native' | 'auto';
export const RESPONSES_VIA: readonly ResponsesVia[] = ['auto', 'chat', 'native'];

export interface RenderConfig {
  readonly address: string;
  readonly timeoutMs: number;
  readonly maxIdleConnsPerHost: number;
  readonly idleConnTimeoutMs: number;
  /** 0 = unlimited. */
  readonly maxTotalTokens: number;
  /** 0 = unlimited. */
  readonly maxTotalPlaceholderTokens: number;
  readonly responsesVia: ResponsesVia;
}

/** Reads and validates the render params (defaults as upstream). Throws ConfigError. */
export function readRenderConfig(params: StepParams): RenderConfig {
  const p = new ParamReader(RENDER_STEP, params);
  return {
    timeoutMs: p.durationMs('timeout', 30_000),
    maxIdleConnsPerHost: p.int('max_idle_conns_per_host', 100, { min: 0 }),
    idleConnTimeoutMs: p.durationMs('idle_conn_timeout', 90_000),
    address: p.string('address', ''),
    maxTotalTokens: p.int('max_total_tokens', 0, { min: 0 }),
    maxTotalPlaceholderTokens: p.int('max_total_placeholder_tokens', 0, { min: 0 }),
    responsesVia: p.oneOf('responses_via', 'auto', RESPONSES_VIA),
  };
}

class RenderStep implements Step {
  readonly type = RENDER_STEP;
  /** `responses_via: auto`: the addresses whose Responses route answered 404. */
  private readonly chatRoutes = new ChatRouteMemo();

  constructor(
    private readonly cfg: RenderConfig,
    /** `null` when `address` is empty or unusable; then `fault` says why, per request. */
    private readonly client: SideCallClient | null,
    private readonly fault: string,
  ) {}

  async execute(ctx: RequestContext): Promise<void> {
    const path = ctx.originalPath;
    if (path === GENERATE_PATH) return this.generate(ctx);
    if (path.includes(COMPLETIONS_PATH)) return this.completions(ctx);
    if (path.includes(CHAT_COMPLETIONS_PATH)) return this.chat(ctx, await this.post(ctx, CHAT_COMPLETIONS_PATH, ctx.body));
    if (path.includes(RESPONSES_PATH)) return this.responses(ctx);
    ctx.log.info({ step: RENDER_STEP, path }, 'skipping render step');
  }

  /** Tokens-in: nothing to tokenise, but everything later steps index must be bounded here. */
  private generate(ctx: RequestContext): void {
    const tokenIds = extractTokenIds(ctx.body['token_ids']);
    this.checkTokenLimit(tokenIds.length);
    ctx.tokenIds = tokenIds;
    validateSamplingParams(ctx.body);
    const raw = ctx.body['features'];
    let features: JsonObject | null = null;
    if (raw !== undefined && raw !== null) {
      if (!isJsonObject(raw)) throw new BadRequestError(`features must be an object, got ${jsonTypeName(raw)}`);
      features = raw;
    }
    const entries = extractMultimodalEntries(features);
    validatePlaceholderBounds(entries, tokenIds.length);
    this.checkPlaceholderLimit(entries);
    ctx.multimodalEntries = entries;
    ctx.log.debug({ step: RENDER_STEP, token_ids_len: tokenIds.length, images: entries.length }, 'complete');
  }

  private async completions(ctx: RequestContext): Promise<void> {
    const prompt = ctx.body['prompt'];
    if (typeof prompt === 'string') {
      const elements = decodeCompletionsRenderResponse(await this.post(ctx, COMPLETIONS_PATH));
      if (elements.length !== 1) throw new UpstreamInvalidError(`render: expected 1 response element, got ${elements.length}`);
      const tokenIds = elements[0]!;
      ctx.tokenIds = tokenIds;
      this.checkTokenLimit(tokenIds?.length ?? 0);
      // Later legs send the ids instead of the text, so the prompt is tokenised only once.
      ctx.body['prompt'] = tokenIds;
      ctx.log.debug({ step: RENDER_STEP, token_ids_len: tokenIds?.length ?? 0 }, 'complete');
      return;
    }
    if (!Array.isArray(prompt)) {
      throw new BadRequestError(`prompt must be a string or token array, got ${jsonTypeName(prompt)}`);
    }
    if (prompt.length === 0) {
      ctx.tokenIds = [];
      return;
    }
    const first: unknown = prompt[0];
    if (typeof first === 'number') {
      // The length check comes first: it is O(1), the element check is not.
      this.checkTokenLimit(prompt.length);
      ctx.tokenIds = toTokenIds(prompt);
      return;
    }
    if (typeof first === 'string') throw new BadRequestError('batched string prompts ([]string) are not supported');
    if (Array.isArray(first)) throw new BadRequestError('batched token prompts ([][]int) are not supported');
    throw new BadRequestError(`invalid prompt array element: ${jsonTypeName(first)}`);
  }

  /**
   * Both routes answer in the chat render shape. With `auto`, a 404 from the Responses route (the
   * route is missing) is answered by the chat route, and an address where that worked goes
   * straight to it from then on. Any other failure is the request's answer, as for chat.
   */
  private async responses(ctx: RequestContext): Promise<void> {
    const via = this.cfg.responsesVia;
    const address = this.cfg.address;
    if (via === 'native' || (via === 'auto' && !this.chatRoutes.usesChat(address))) {
      const res = await this.call(ctx, RESPONSES_PATH, ctx.body);
      if (res.status === 200) return this.chat(ctx, res.body);
      if (via === 'native' || res.status !== 404) throw new UpstreamError(RENDER_STEP, res.status, res.body.toString('utf8'));
      ctx.log.debug({ step: RENDER_STEP, address }, 'no Responses render route; rendering through the chat route');
    }
    const answer = await this.post(
      ctx,
      CHAT_COMPLETIONS_PATH,
      responsesAsChatRender(ctx.body, (s) => ctx.text(s)),
    );
    if (via === 'auto' && !this.chatRoutes.usesChat(address)) {
      this.chatRoutes.rememberChat(address);
      ctx.log.info(
        { step: RENDER_STEP, address },
        'render service has no Responses route: Responses requests now render through the chat route',
      );
    }
    this.chat(ctx, answer);
  }

  /** Takes a chat render answer: the token ids, and the features of the images replace-media-urls found. */
  private chat(ctx: RequestContext, answer: Buffer): void {
    const res = decodeChatRenderResponse(answer);
    ctx.tokenIds = res.tokenIds;
    this.checkTokenLimit(res.tokenIds?.length ?? 0);

    // The images were found by replace-media-urls; render must report on exactly those.
    const entries = ctx.multimodalEntries;
    const expected = entries.length;
    if (res.hashes.length !== expected)
      throw new UpstreamInvalidError(`render returned ${res.hashes.length} mm_hashes but expected ${expected}`);
    if (res.placeholders.length !== expected) {
      throw new UpstreamInvalidError(`render returned ${res.placeholders.length} mm_placeholders but expected ${expected}`);
    }
    if (res.kwargs.length !== expected)
      throw new UpstreamInvalidError(`render returned ${res.kwargs.length} kwargs_data but expected ${expected}`);
    for (let i = 0; i < expected; i++) {
      const e = entries[i]!;
      e.hash = res.hashes[i]!;
      e.kwargsData = res.kwargs[i]!;
      e.placeholder = res.placeholders[i]!;
    }
    this.checkPlaceholderLimit(entries);
    ctx.log.debug({ step: RENDER_STEP, token_ids_len: res.tokenIds?.length ?? 0, images: expected }, 'complete');
  }

  /** POSTs `body` to `<address><basePath>/render`; returns the 200 body. */
  private async post(ctx: RequestContext, basePath: string, body: JsonObject = ctx.body): Promise<Buffer> {
    const res = await this.call(ctx, basePath, body);
    if (res.status !== 200) throw new UpstreamError(RENDER_STEP, res.status, res.body.toString('utf8'));
    return res.body;
  }

  /** POSTs `body` to `<address><basePath>/render`; any status is returned (a 200's headers are taken). */
  private async call(ctx: RequestContext, basePath: string, body: JsonObject): Promise<SideCallResponse> {
    if (!this.client) throw new Error(this.fault);
    // No epp-profile and no stamped request id: the render service is not behind the EPP, and
    // upstream sends it only the client's own headers.
    const headers = ctx.forwardedHeaders();
    headers[HEADER_CONTENT_TYPE] = CONTENT_TYPE_JSON;
    const res = await this.client.post(`${basePath}/render`, headers, ctx.serialize(body), {
      step: RENDER_STEP,
      signal: ctx.signal,
      totalTimeoutMs: this.cfg.timeoutMs,
      okStatuses: [200],
      log: ctx.log,
    });
    if (res.status === 200) ctx.captureResponseHeaders(res);
    return res;
  }

  private checkTokenLimit(count: number): void {
    const max = this.cfg.maxTotalTokens;
    if (max > 0 && count > max) throw new BadRequestError(`too many total tokens: got ${count}, max ${max}`);
  }

  private checkPlaceholderLimit(entries: readonly MultimodalEntry[]): void {
    const max = this.cfg.maxTotalPlaceholderTokens;
    if (max <= 0) return;
    let total = 0;
    for (const e of entries) {
      total += e.placeholder?.length ?? 0;
      // Stop at the first excess, as upstream, which also keeps the reported sum bounded.
      if (total > max) throw new BadRequestError(`too many placeholder tokens: got ${total}, max ${max}`);
    }
  }
}

export const createRenderStep: StepFactory = (params: StepParams, deps: StepDeps): Step => {
  const cfg = readRenderConfig(params);
  // Upstream does not validate the address at start-up: an empty or unusable one fails
  // each request that needs the service with a 502, while generate requests still work.
  if (cfg.address === '') {
    return new RenderStep(cfg, null, "render: service address not configured (set 'address' in render step params)");
  }
  try {
    const client = deps.clientFor(cfg.address, {
      // 0 is Go's default (2), which the side-call pool applies.
      maxIdleConns: cfg.maxIdleConnsPerHost,
      idleTimeoutMs: cfg.idleConnTimeoutMs,
    });
    return new RenderStep(cfg, client, '');
  } catch (err) {
    deps.log.error({ step: RENDER_STEP, err: (err as Error).message }, 'render address unusable; render requests will fail');
    return new RenderStep(cfg, null, `render request failed: invalid address: ${(err as Error).message}`);
  }
};
