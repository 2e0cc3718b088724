/**
 * `decode`: the terminal step. It makes no call: Envoy forwards the client
 * request, rewritten here, to a decode worker (same path), and streams the answer back.
 */
import type { JsonObject, RequestContext } from '../pipeline/context';
import { ParamReader } from '../pipeline/params';
import type { Step, StepDeps, StepFactory, StepOutcome, StepParams } from '../pipeline/step';
import type { KvConnector } from '../connectors/kv';
import { buildKvConnector } from '../connectors/kv';
import { requireGateway } from './gateway-required';
import { ForceStream, readForceStreamConfig } from './force-stream/force-stream';
import {
  CONTENT_TYPE_JSON,
  HEADER_CONTENT_TYPE,
  HEADER_EPP_PROFILE,
  HEADER_REQUEST_ID,
  buildMmFeatures,
  dropTransferParams,
  injectImageUuids,
  isJsonObject,
  resolveFormat,
  setGenerateTransferParams,
} from './wire';

export const DECODE_STEP = 'decode';

class DecodeStep implements Step {
  readonly type = DECODE_STEP;

  constructor(
    private readonly useOpenAIFormat: boolean,
    private readonly kv: KvConnector,
    /** Set when `force_stream` is on (reference §12.3). */
    private readonly forceStream: ForceStream | null = null,
  ) {}

  async execute(ctx: RequestContext): Promise<StepOutcome> {
    // Prefill skipped (short prompt, or no prefill endpoint): decode computes the prompt itself, and
    // KV params would send the worker looking for blocks no prefill produced.
    const aggregated = ctx.disaggregation !== null && ctx.disaggregation !== 'disaggregated';
    const kv = aggregated ? null : this.kv.prepareDecode(ctx);
    if (kv) ctx.log.trace({ step: DECODE_STEP, params: kv }, 'preparing decode kv params');
    injectImageUuids(ctx);

    // The body is mutated in place: decode is last, and the body is serialised once afterwards.
    const body = ctx.body;
    // Transfer params on a decode body are ours alone: the KV params set below, never EC params
    // (encoder outputs are prefill's; decode pulls only KV). A client's own, at any place a
    // worker reads them, would point the worker at a peer of the client's choosing.
    dropTransferParams(body);
    switch (resolveFormat(this.useOpenAIFormat, ctx.originalPath)) {
      case 'chat': {
        if (kv) body['kv_transfer_params'] = kv;
        const tokens: JsonObject = { token_ids: ctx.tokenIds };
        const features = buildMmFeatures(ctx.multimodalEntries, false);
        if (features) tokens['features'] = features;
        body['tokens'] = tokens;
        break;
      }
      case 'responses':
        // §12.9: the client body plus top-level KV params (and the image uuids set above).
        if (kv) body['kv_transfer_params'] = kv;
        break;
      case 'completions':
        if (kv) body['kv_transfer_params'] = kv;
        if (ctx.tokenIds && ctx.tokenIds.length > 0) body['prompt'] = ctx.tokenIds;
        break;
      case 'generate': {
        // Also the shape of a chat request under use_openai_format=false. The client's
        // sampling params, features and token ids are kept.
        let sampling = body['sampling_params'];
        if (!isJsonObject(sampling)) {
          sampling = {};
          body['sampling_params'] = sampling;
        }
        if (kv) setGenerateTransferParams(sampling as JsonObject, kv, null);
        break;
      }
    }

    if (this.forceStream) {
      // A non-streaming request may run upstream as a streaming one, answered here; else the
      // normal forwarded decode below.
      const forced = await this.forceStream.run(ctx, body);
      if (forced) return forced;
    }

    ctx.decode = {
      headers: {
        [HEADER_EPP_PROFILE]: 'decode',
        [HEADER_REQUEST_ID]: ctx.requestId,
        [HEADER_CONTENT_TYPE]: CONTENT_TYPE_JSON,
      },
    };
  }
}

export const createDecodeStep: StepFactory = (params: StepParams, deps: StepDeps): Step => {
  const gateway = requireGateway(DECODE_STEP, deps);
  const p = new ParamReader(DECODE_STEP, params);
  const useOpenAIFormat = p.bool('use_openai_format', true);
  const kv = buildKvConnector(p.string('kv_connector', ''), DECODE_STEP);
  const force = readForceStreamConfig(DECODE_STEP, p, params);
  const forceStream = force ? new ForceStream(force, gateway, deps.gatewayTimeoutMs, deps.forceStream) : null;
  return new DecodeStep(useOpenAIFormat, kv, forceStream);
};
