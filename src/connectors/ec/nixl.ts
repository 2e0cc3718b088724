import { isDeepStrictEqual } from 'node:util';
import type { EcConnector } from './connector';
import { EC_NIXL } from './connector';

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * NIXL: each encoder answers `{"<mm_hash>": <descriptor>}` for its image; prefill receives them
 * flattened into one object keyed by hash. Descriptors are opaque to us.
 */
export const nixlEc: EcConnector = {
  name: EC_NIXL,

  mergeEncodeResponse(ctx, params) {
    if (params === null || Object.keys(params).length === 0) {
      ctx.log.warn('encoder returned no ec_transfer_params; no nixl descriptor will be forwarded for this image');
      return;
    }
    (ctx.ecTransferParams ??= []).push(params);
    ctx.log.trace({ total: ctx.ecTransferParams.length }, 'merged encode response');
  },

  preparePrefill(ctx) {
    const out: Record<string, unknown> = {};
    for (const entry of ctx.ecTransferParams ?? []) {
      for (const [hash, descriptor] of Object.entries(entry)) {
        // A hash without a descriptor has nothing to transfer; never send "<hash>": null.
        if (descriptor === null || descriptor === undefined) continue;
        // Copied so a caller that edits the prefill body cannot reach back into the context.
        const copy = isObject(descriptor) ? { ...descriptor } : descriptor;
        if (Object.prototype.hasOwnProperty.call(out, hash)) {
          // Two encoders answered for one image. Identical answers are harmless; picking one of
          // two different ones could point prefill at buffers a peer has since reused.
          if (!isDeepStrictEqual(out[hash], copy)) {
            throw new Error(`ec_transfer_params: conflicting descriptors for mm_hash ${JSON.stringify(hash)} across encoder responses`);
          }
          continue;
        }
        out[hash] = copy;
      }
    }
    return out;
  },
};
