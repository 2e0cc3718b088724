/** Building replace-media-urls steps and contexts for the media tests. */
import type { SideCallClient } from '../../../../src/gateway/client';
import { silentLogger } from '../../../../src/observability/logger';
import type { JsonObject } from '../../../../src/pipeline/context';
import { classify } from '../../../../src/pipeline/errors';
import type { Step, StepDeps, StepParams } from '../../../../src/pipeline/step';
import { replaceMediaUrlsStepFactory, type MediaNetwork } from '../../../../src/steps/replace-media-urls';
import { makeCtx } from '../fake-upstream';

/** replace-media-urls makes no gateway call; any use of these would be a bug. */
export const mediaDeps: StepDeps = {
  gateway: new Proxy({} as SideCallClient, {
    get: () => {
      throw new Error('replace-media-urls must not use the gateway');
    },
  }),
  clientFor: () => {
    throw new Error('replace-media-urls must not build clients');
  },
  gatewayTimeoutMs: 1000,
  log: silentLogger(),
  registerRoute: () => undefined,
};

export function mediaStep(params: StepParams, network: MediaNetwork): Step {
  return replaceMediaUrlsStepFactory(network)(params, mediaDeps);
}

/** A chat body whose user message holds the given image URLs (after one text part). */
export function chatWith(...urls: string[]): JsonObject {
  return {
    model: 'm',
    messages: [
      { role: 'system', content: 'be brief' },
      {
        role: 'user',
        content: [{ type: 'text', text: 'describe' }, ...urls.map((url) => ({ type: 'image_url', image_url: { url, detail: 'low' } }))],
      },
    ],
  };
}

/** The URLs of the body's image parts, in order. */
export function imageUrls(body: JsonObject): string[] {
  const out: string[] = [];
  for (const m of body['messages'] as JsonObject[]) {
    if (!Array.isArray(m['content'])) continue;
    for (const p of m['content'] as JsonObject[]) if (p['type'] === 'image_url') out.push((p['image_url'] as JsonObject)['url'] as string);
  }
  return out;
}

/** Runs the step; resolves with the context, or with the status and message the client would get. */
export async function run(step: Step, body: JsonObject, signal?: AbortSignal) {
  const ctx = makeCtx({ body, signal });
  try {
    await step.execute(ctx);
    return { ctx, status: 200, error: null as Error | null, message: '', errorClass: null as string | null };
  } catch (err) {
    const c = classify(err, 'rid');
    return { ctx, status: c.status, error: err as Error, message: c.message, errorClass: c.errorClass as string | null };
  }
}
