/**
 * `prefill` (reference §3.5): one single-token, non-streaming request through the gateway to a
 * prefill worker, whose answer carries the KV-cache location decode will pull from.
 */
import type { JsonObject, RequestContext } from '../pipeline/context';
import { UpstreamError } from '../pipeline/errors';
import { ParamReader } from '../pipeline/params';
import type { Step, StepDeps, StepFactory, StepParams } from '../pipeline/step';
import type { SideCallClient } from '../gateway/client';
import type { KvConnector } from '../connectors/kv';
import { buildKvConnector } from '../connectors/kv';
import type { EcConnector } from '../connectors/ec';
import { buildEcConnector } from '../connectors/ec';
import { requireGateway } from './gateway-required';
import {
  buildMmFeatures,
  capSingleTokenOutput,
  coerceParamsMap,
  decodeFirstJsonValue,
  gatewayLegHeaders,
  isJsonObject,
  jsonTypeName,
  pathForFormat,
  resolveFormat,
  setGenerateTransferParams,
} from './wire';
import type { WireFormat } from './wire';

export const PREFILL_STEP = 'prefill';

function nonEmpty(o: Record<string, unknown>): boolean {
  for (const _ in o) return true;
  return false;
}

/** The prefill body in the resolved format. Never mutates the client body. */
export function buildPrefillBody(
  ctx: RequestContext,
  format: WireFormat,
  kv: Record<string, unknown>,
  ec: Record<string, unknown>,
): JsonObject {
  const features = buildMmFeatures(ctx.multimodalEntries, true);
  switch (format) {
    case 'chat': {
      // A shallow copy is enough: capSingleTokenOutput only touches top-level keys for chat.
      const body: JsonObject = { ...ctx.body };
      capSingleTokenOutput(body, format);
      const tokens: JsonObject = { token_ids: ctx.tokenIds };
      if (features) tokens['features'] = { mm_hashes: features.mm_hashes, mm_placeholders: features.mm_placeholders };
      body['tokens'] = tokens;
      body['kv_transfer_params'] = kv;
      if (nonEmpty(ec)) body['ec_transfer_params'] = ec;
      return body;
    }
    case 'completions': {
      // A fresh body: client sampling fields are not carried to prefill (Q4).
      const prompt = ctx.tokenIds && ctx.tokenIds.length > 0 ? ctx.tokenIds : (ctx.body['prompt'] ?? null);
      const body: JsonObject = { request_id: ctx.requestId, model: ctx.model, prompt, kv_transfer_params: kv };
      capSingleTokenOutput(body, format);
      if (features) body['features'] = features;
      if (nonEmpty(ec)) body['ec_transfer_params'] = ec;
      return body;
    }
    case 'generate': {
      // A fresh body: the client's sampling_params are not carried (Q3); vLLM's generate
      // endpoint reads transfer params only from sampling_params.extra_args.
      const body: JsonObject = { request_id: ctx.requestId, token_ids: ctx.tokenIds, model: ctx.model };
      setGenerateTransferParams(capSingleTokenOutput(body, format), kv, ec);
      if (features) body['features'] = features;
      return body;
    }
  }
}

class PrefillStep implements Step {
  readonly type = PREFILL_STEP;

  constructor(
    private readonly useOpenAIFormat: boolean,
    private readonly kv: KvConnector,
    private readonly ec: EcConnector,
    private readonly gateway: SideCallClient,
    private readonly headersTimeoutMs: number,
  ) {}

  async execute(ctx: RequestContext): Promise<void> {
    // Conflicting EC descriptors fail here, before the gateway is contacted.
    const ec = this.ec.preparePrefill(ctx);
    const kv = this.kv.preparePrefill(ctx);
    const format = resolveFormat(this.useOpenAIFormat, ctx.originalPath);
    const body = buildPrefillBody(ctx, format, kv, ec);
    const path = pathForFormat(format);
    const headers = gatewayLegHeaders(ctx.forwardedHeaders(), ctx.requestId, 'prefill');
    ctx.log.debug({ step: PREFILL_STEP, path }, 'sending request');

    const res = await this.gateway.post(path, headers, JSON.stringify(body), {
      step: PREFILL_STEP,
      signal: ctx.signal,
      headersTimeoutMs: this.headersTimeoutMs,
      okStatuses: [200],
    });
    if (res.status !== 200) throw new UpstreamError(PREFILL_STEP, res.status, res.body.toString('utf8'));

    let answer: unknown;
    try {
      answer = decodeFirstJsonValue(res.body);
    } catch (err) {
      throw new Error(`prefill: decode response: ${(err as Error).message}`);
    }
    // Upstream decodes into a struct: null is an empty answer, any other non-object a failure.
    if (answer !== null && !isJsonObject(answer)) {
      throw new Error(`prefill: decode response: expected an object, got ${jsonTypeName(answer)}`);
    }
    ctx.kvTransferParams = coerceParamsMap(answer?.['kv_transfer_params'], 'kv_transfer_params', ctx.log);
    ctx.log.debug({ step: PREFILL_STEP }, 'complete');
  }
}

export const createPrefillStep: StepFactory = (params: StepParams, deps: StepDeps): Step => {
  const gateway = requireGateway(PREFILL_STEP, deps);
  const p = new ParamReader(PREFILL_STEP, params);
  const useOpenAIFormat = p.bool('use_openai_format', true);
  const kv = buildKvConnector(p.string('kv_connector', ''), PREFILL_STEP);
  const ec = buildEcConnector(p.string('ec_connector', ''), PREFILL_STEP);
  return new PrefillStep(useOpenAIFormat, kv, ec, gateway, deps.gatewayTimeoutMs);
};
