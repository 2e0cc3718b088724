/**
 * The prefill leg's body: shared by the `prefill` step and the `prefill-decode`
 * step, which sends the same body with its transfer fields at the top level.
 */
import type { JsonObject, RequestContext } from '../../pipeline/context';
import { buildMmFeatures } from './features';
import type { WireFormat } from './format';
import { isJsonObject } from './json';
import { capSingleTokenOutput } from './single-token';
import { dropTransferParams, setGenerateTransferParams } from './transfer-params';

function nonEmpty(o: Record<string, unknown>): boolean {
  for (const _ in o) return true;
  return false;
}

/**
 * The prefill body in the resolved format. Never mutates the client body. `kv` null leaves
 * `kv_transfer_params` out entirely (the `prefill-decode` step's connectors carry their transfer
 * fields at the top level instead).
 */
export function buildPrefillBody(
  ctx: RequestContext,
  format: WireFormat,
  kv: Record<string, unknown> | null,
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
      // Transfer params are ours to set: a client's own would point the worker at a peer of
      // its choosing.
      dropTransferParams(body);
      if (kv) body['kv_transfer_params'] = kv;
      if (nonEmpty(ec)) body['ec_transfer_params'] = ec;
      return body;
    }
    case 'responses': {
      // §12.9: the client body, capped to one stored-nowhere token, with our transfer params. No
      // `tokens` field: the Responses endpoint re-renders the input itself.
      const body: JsonObject = { ...ctx.body };
      capSingleTokenOutput(body, format);
      dropTransferParams(body);
      if (kv) body['kv_transfer_params'] = kv;
      if (nonEmpty(ec)) body['ec_transfer_params'] = ec;
      return body;
    }
    case 'completions': {
      // A fresh body: client sampling fields are not carried to prefill.
      const prompt = ctx.tokenIds && ctx.tokenIds.length > 0 ? ctx.tokenIds : (ctx.body['prompt'] ?? null);
      const body: JsonObject = { request_id: ctx.requestId, model: ctx.model, prompt };
      if (kv) body['kv_transfer_params'] = kv;
      capSingleTokenOutput(body, format);
      if (features) body['features'] = features;
      if (nonEmpty(ec)) body['ec_transfer_params'] = ec;
      return body;
    }
    case 'generate': {
      // A fresh body: the client's sampling_params are not carried; vLLM's generate
      // endpoint reads transfer params only from sampling_params.extra_args.
      const body: JsonObject = { request_id: ctx.requestId, token_ids: ctx.tokenIds, model: ctx.model };
      const sampling = capSingleTokenOutput(body, format);
      if (kv || nonEmpty(ec)) setGenerateTransferParams(sampling, kv, ec);
      if (!kv && isJsonObject(sampling['extra_args'])) delete (sampling['extra_args'] as JsonObject)['kv_transfer_params'];
      if (features) body['features'] = features;
      return body;
    }
  }
}
