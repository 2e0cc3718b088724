import { UpstreamInvalidError } from '../../pipeline/errors';

/**
 * A forced stream that could not be turned into a reply. `ceiling`: the buffered answer outgrew
 * its reservation (or one SSE line its cap); `parse`: a frame was not a JSON object; `read`: the
 * upstream body failed. All answer 502 (the worker broke the protocol or the bound), as upstream.
 */
export class ForceStreamError extends UpstreamInvalidError {
  constructor(
    readonly kind: 'ceiling' | 'parse' | 'read',
    message: string,
  ) {
    super(`force-stream: ${message}`);
  }
}
