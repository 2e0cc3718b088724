/**
 * `encode`: one single-token request per image through the gateway to an encode
 * worker, in parallel, so the encoder cache holds every image before prefill runs. The EC connector
 * turns the answers into what prefill forwards.
 */
import type { JsonObject, MultimodalEntry, RequestContext } from '../pipeline/context';
import { UpstreamError, UpstreamInvalidError } from '../pipeline/errors';
import { ParamReader } from '../pipeline/params';
import type { Step, StepDeps, StepFactory, StepParams } from '../pipeline/step';
import type { AnswerHeaders, SideCallClient } from '../pipeline/side-call';
import type { EcConnector } from '../connectors/ec';
import { buildEcConnector } from '../connectors/ec';
import { requireGateway } from './gateway-required';
import { redactHeaders } from '../pipeline/redact';
import {
  GENERATE_PATH,
  MODALITY_IMAGE,
  capSingleTokenOutput,
  coerceParamsMap,
  decodeFirstJsonValue,
  gatewayLegHeaders,
  isJsonObject,
  jsonTypeName,
  pathForFormat,
  resolveFormat,
  responsesImageParts,
  byteLength,
} from './wire';
import type { WireFormat } from './wire';

export const ENCODE_STEP = 'encode';

/**
 * The prompt an encode worker sees for one image: BOS, then the image's placeholder token repeated
 * over the image's span. BOS falls back to 1 and the placeholder to 0 when render gave no ids (or
 * an offset past them), as upstream.
 */
export function encodeTokenIds(tokenIds: readonly number[] | null, entry: MultimodalEntry): number[] {
  let bos = 1;
  let placeholder = 0;
  const offset = entry.placeholder?.offset ?? 0;
  if (tokenIds && tokenIds.length > 0) {
    bos = tokenIds[0]!;
    if (offset < tokenIds.length) placeholder = tokenIds[offset]!;
  }
  const length = entry.placeholder?.length ?? 0;
  const ids = new Array<number>(1 + length).fill(placeholder);
  ids[0] = bos;
  return ids;
}

/** Every `image_url` part's `image_url` object in body order (what entry.index counts). */
function imageUrlObjects(body: JsonObject): unknown[] {
  const messages = body['messages'];
  if (!Array.isArray(messages)) return [];
  const out: unknown[] = [];
  for (const msg of messages) {
    if (!isJsonObject(msg) || !Array.isArray(msg['content'])) continue;
    for (const part of msg['content'] as unknown[]) {
      if (isJsonObject(part) && part['type'] === 'image_url') out.push(part['image_url']);
    }
  }
  return out;
}

/** The encode body for one image, in the resolved format. Never mutates the client body. */
export function buildEncodeBody(
  ctx: RequestContext,
  entry: MultimodalEntry,
  format: WireFormat,
  imageUrls: readonly unknown[],
): JsonObject {
  const tokenIds = encodeTokenIds(ctx.tokenIds, entry);
  const hashes = { [MODALITY_IMAGE]: [entry.hash ?? ''] };
  const placeholders = { [MODALITY_IMAGE]: [{ offset: 1, length: entry.placeholder?.length ?? 0 }] };
  if (format === 'responses') {
    // Responses: the client's input_image part verbatim, as a one-part user input.
    const found = imageUrls[entry.index];
    const part = isJsonObject(found) ? found : { type: 'input_image', image_url: '' };
    const body: JsonObject = { model: ctx.model, input: [{ role: 'user', content: [part] }] };
    capSingleTokenOutput(body, format);
    return body;
  }
  if (format === 'chat') {
    // Only the image itself: no text, no client sampling fields, no client `uuid`.
    const found = imageUrls[entry.index];
    const imageUrl = isJsonObject(found) ? found : { url: '' };
    const body: JsonObject = {
      model: ctx.model,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: imageUrl }] }],
      tokens: { token_ids: tokenIds, features: { mm_hashes: hashes, mm_placeholders: placeholders } },
    };
    capSingleTokenOutput(body, format);
    return body;
  }
  // Tokens-in (and, unreachably, completions): the preprocessed tensor travels as kwargs_data;
  // an encoder-cache hit ("") is sent as null, never as an empty tensor.
  const body: JsonObject = {
    model: ctx.model,
    token_ids: tokenIds,
    features: {
      mm_hashes: hashes,
      mm_placeholders: placeholders,
      kwargs_data: { [MODALITY_IMAGE]: [entry.kwargsData ? entry.kwargsData : null] },
    },
  };
  capSingleTokenOutput(body, 'generate');
  return body;
}

class EncodeStep implements Step {
  readonly type = ENCODE_STEP;

  constructor(
    private readonly useOpenAIFormat: boolean,
    private readonly maxParallel: number,
    private readonly ec: EcConnector,
    private readonly gateway: SideCallClient,
    private readonly headersTimeoutMs: number,
  ) {}

  async execute(ctx: RequestContext): Promise<void> {
    const entries = ctx.multimodalEntries;
    if (entries.length === 0) return;
    if (ctx.originalPath === GENERATE_PATH) {
      // Tokens-in clients send kwargs_data themselves; prefill encodes inline.
      ctx.log.info({ step: ENCODE_STEP }, 'skipping encode for generate request');
      return;
    }
    const format = resolveFormat(this.useOpenAIFormat, ctx.originalPath);
    const path = pathForFormat(format);
    const imageUrls =
      format === 'chat'
        ? imageUrlObjects(ctx.body)
        : format === 'responses'
          ? responsesImageParts(ctx.body).filter((p) => typeof p['image_url'] === 'string')
          : [];

    const answerHeaders: AnswerHeaders[] = [];
    const results = await this.fanOut(ctx, entries.length, (i, signal) =>
      this.encodeOne(ctx, i, buildEncodeBody(ctx, entries[i]!, format, imageUrls), path, signal, answerHeaders),
    );
    // Relayed headers (forward_response_headers): the value most encode answers agree on.
    ctx.captureFanOutHeaders(answerHeaders);
    // Merged only once every image is encoded, in entry order, so a failure publishes nothing.
    for (const r of results) this.ec.mergeEncodeResponse(ctx, r);
    ctx.log.info({ step: ENCODE_STEP, count: results.length }, 'all sub-requests complete');
  }

  /**
   * Runs `task(0..n-1)` with at most `maxParallel` in flight, launched in index order. The first
   * failure aborts the others (their calls are cancelled) and is what the step reports.
   */
  private async fanOut<T>(ctx: RequestContext, n: number, task: (i: number, signal: AbortSignal) => Promise<T>): Promise<T[]> {
    const results = new Array<T>(n);
    const group = new AbortController();
    const signal = AbortSignal.any([ctx.signal, group.signal]);
    let firstError: unknown = null;
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < n && !signal.aborted) {
        const i = next++;
        try {
          results[i] = await task(i, signal);
        } catch (err) {
          if (firstError === null) firstError = err;
          group.abort();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.maxParallel, n) }, worker));
    if (firstError !== null) throw firstError;
    return results;
  }

  private async encodeOne(
    ctx: RequestContext,
    i: number,
    body: JsonObject,
    path: string,
    signal: AbortSignal,
    answerHeaders: AnswerHeaders[],
  ): Promise<Record<string, unknown> | null> {
    const step = `${ENCODE_STEP}[${i}]`;
    const headers = gatewayLegHeaders(ctx.forwardedHeaders(), ctx.requestId, 'encode');
    const bytes = ctx.serialize(body);
    if (ctx.log.isLevelEnabled('debug')) {
      ctx.log.debug(
        { step: ENCODE_STEP, index: i, method: 'POST', path, bodyLen: byteLength(bytes), headers: redactHeaders(headers) },
        'sub-request body',
      );
    }
    const res = await this.gateway.post(path, headers, bytes, {
      step,
      signal,
      headersTimeoutMs: this.headersTimeoutMs,
      // gateway.timeout bounds only the wait for headers (as upstream); an encoder trickling its
      // body after them must not hold the request until the client leaves. Same bound as prefill.
      totalTimeoutMs: this.headersTimeoutMs > 0 ? 2 * this.headersTimeoutMs : 0,
      okStatuses: [200],
      log: ctx.log,
    });
    if (res.status !== 200) throw new UpstreamError(step, res.status, res.body.toString('utf8'));
    answerHeaders.push(res);
    let answer: unknown;
    try {
      answer = decodeFirstJsonValue(res.body);
    } catch (err) {
      throw new UpstreamInvalidError(`${step}: decode response: ${(err as Error).message}`);
    }
    // Upstream decodes into a struct: null is an empty answer, any other non-object a failure.
    if (answer !== null && !isJsonObject(answer))
      throw new UpstreamInvalidError(`${step}: decode response: expected an object, got ${jsonTypeName(answer)}`);
    return coerceParamsMap(answer?.['ec_transfer_params'], 'ec_transfer_params', ctx.log.child({ index: i }));
  }
}

export const createEncodeStep: StepFactory = (params: StepParams, deps: StepDeps): Step => {
  const gateway = requireGateway(ENCODE_STEP, deps);
  const p = new ParamReader(ENCODE_STEP, params);
  const useOpenAIFormat = p.bool('use_openai_format', true);
  const maxParallel = p.int('max_parallel', 8, { min: 1 });
  const ec = buildEcConnector(p.string('ec_connector', ''), ENCODE_STEP);
  return new EncodeStep(useOpenAIFormat, maxParallel, ec, gateway, deps.gatewayTimeoutMs);
};
