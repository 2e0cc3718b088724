/**
 * What a configured pipeline cannot do, said once at start-up and answered clearly per request
 * (issue #12): a request the deployment does not support gets a 400 that says why, never a 502.
 *
 * Upstream lets an image request on a pipeline without `replace-media-urls` reach render, which
 * then fails with `render returned N mm_hashes but expected 0` (a 502, reference §3.3 / Q8), and
 * on a pipeline without render the client's image URLs would go to the workers as they are (for
 * them to fetch, with no SSRF guard). We refuse such a request with a 400 instead.
 */
import type { RequestContext } from '../pipeline/context';
import { BadRequestError } from '../pipeline/errors';
import { collectImageRefs, REPLACE_MEDIA_URLS_STEP } from './replace-media-urls';

export interface PipelineCoverage {
  /** Start-up warnings, one per gap, each naming the steps involved. */
  readonly warnings: readonly string[];
  /** The per-request check for the handler (HandlerOptions.admit); `undefined` when nothing is refused. */
  readonly admit: ((ctx: RequestContext) => void) | undefined;
}

export const IMAGES_UNSUPPORTED_MESSAGE = `this deployment does not accept images: its pipeline has no "${REPLACE_MEDIA_URLS_STEP}" step`;

/** Reads the configured step types (in order) for the combinations that leave a request unserved. */
export function pipelineCoverage(types: readonly string[]): PipelineCoverage {
  const has = (t: string) => types.includes(t);
  const warnings: string[] = [];
  const terminal = has('decode') || has('prefill-decode');
  const media = has(REPLACE_MEDIA_URLS_STEP);
  if (types.length > 0 && !terminal) {
    warnings.push('pipeline has no "decode" (or "prefill-decode") step: after the steps, requests go on to decode as the client sent them');
  }
  if (!media) {
    warnings.push(`pipeline has no "${REPLACE_MEDIA_URLS_STEP}" step: chat requests with images get 400 ("${IMAGES_UNSUPPORTED_MESSAGE}")`);
  }
  if (has('encode') && !media)
    warnings.push(`pipeline has "encode" but no "${REPLACE_MEDIA_URLS_STEP}": encode never runs (images are refused)`);
  if (has('encode') && !has('render'))
    warnings.push('pipeline has "encode" but no "render": encode needs the image hashes render produces, so it never runs');
  if (media && has('render') && !has('encode'))
    warnings.push(
      `pipeline has "${REPLACE_MEDIA_URLS_STEP}" and "render" but no "encode": images are encoded by the prefill (or decode) workers themselves`,
    );
  const admit = media
    ? undefined
    : (ctx: RequestContext): void => {
        if (collectImageRefs(ctx.body).length > 0) throw new BadRequestError(IMAGES_UNSUPPORTED_MESSAGE);
      };
  return { warnings, admit };
}
