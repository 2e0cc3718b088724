/**
 * Error kinds a step may raise, and the one place they are turned into a client answer.
 *
 * Upstream error bodies are kept on the error for logs; {@link classify} puts none of them in what
 * the client sees, but for one part: the sanitised `message` of a worker's JSON 4xx, which is about
 * the client's own input (upstream-message.ts).
 */
import { upstreamClientMessage } from './upstream-message';

/** Invalid client input. Always a 400; the message is ours and safe to show. */
export class BadRequestError extends Error {
  override readonly name = 'BadRequestError';
}

/**
 * The path is not on the allow-list (path-policy.ts): 404. Its answer is the one Envoy's own route
 * gives for such a path, byte for byte, so it names no request id.
 */
export class PathNotServedError extends Error {
  override readonly name = 'PathNotServedError';
  constructor() {
    super('not found: this path is not served here');
  }
}

/** The request body is above the configured limit. */
export class PayloadTooLargeError extends Error {
  override readonly name = 'PayloadTooLargeError';
  constructor(message = 'request body too large') {
    super(message);
  }
}

/**
 * The request's headers leave no room for the ones we add under the proxy's header-count limit:
 * the proxy would refuse our mutation (a bare 500 after the whole pipeline ran), so it is a 431 now.
 */
export class TooManyHeadersError extends Error {
  override readonly name = 'TooManyHeadersError';
  constructor(
    readonly entries: number,
    readonly allowed: number,
  ) {
    super(`request has too many headers (${entries}); the limit is ${Math.max(0, allowed)}`);
  }
}

/** Upstream error bodies are read up to this many bytes, for logs only. */
export const UPSTREAM_ERROR_BODY_CAP = 8192;

/** A side call answered with a status other than the one the step needs. */
export class UpstreamError extends Error {
  override readonly name = 'UpstreamError';
  constructor(
    /** `render`, `prefill`, `encode[<i>]`, ... */
    readonly step: string,
    readonly status: number,
    /** At most {@link UPSTREAM_ERROR_BODY_CAP} bytes of the upstream body; of a 4xx, its sanitised message is shown. */
    readonly body: string,
  ) {
    super(`${step}: upstream returned HTTP ${status}`);
  }
}

/**
 * A side call answered with the status the step needs, but the answer itself is unusable: a body
 * that is not the JSON the step expects, counts that disagree, a header the protocol requires
 * missing. The worker (or the EPP) broke the protocol, not the client and not us: 502.
 */
export class UpstreamInvalidError extends Error {
  override readonly name = 'UpstreamInvalidError';
}

/**
 * An image the request points at could not be fetched: the host answered something other than
 * 200, could not be reached, timed out, sent a truncated body or too many redirects. Not the
 * client's fault in a way we can tell it (a refused URL or host is a {@link BadRequestError}): 502.
 */
export class MediaUnavailableError extends Error {
  override readonly name: string = 'MediaUnavailableError';
  constructor(
    message: string,
    /** The image host's status, when it answered with something other than 200. */
    readonly status?: number,
  ) {
    super(message);
  }
}

/** A side call never got a status: connect failure, reset, timeout, abort. */
export class TransportError extends Error {
  override readonly name = 'TransportError';
  constructor(
    readonly step: string,
    message: string,
    readonly timedOut = false,
  ) {
    super(`${step}: ${message}`);
  }
}

/** The client went away (Envoy ended the stream) before the pipeline finished. */
export class CancelledError extends Error {
  override readonly name = 'CancelledError';
  constructor(message = 'pipeline cancelled: client went away') {
    super(message);
  }
}

/** How an error is reported: in dynamic metadata, metrics and logs. */
export type ErrorClass =
  | 'bad_request'
  | 'payload_too_large'
  | 'upstream_4xx'
  | 'upstream_5xx'
  | 'upstream_invalid'
  | 'transport'
  | 'media_unavailable'
  | 'cancelled'
  | 'internal';

export interface ClassifiedError {
  readonly status: number;
  readonly errorClass: ErrorClass;
  /** OpenAI error `type`. */
  readonly type: 'invalid_request_error' | 'api_error';
  /** Client-safe message; upstream text only as a 4xx's sanitised message. */
  readonly message: string;
  /** The upstream status, when a side call answered. */
  readonly upstreamStatus?: number;
}

/** Maps any thrown value to the client's answer. */
export function classify(err: unknown, requestId: string): ClassifiedError {
  const id = ` (request_id: ${requestId})`;
  if (err instanceof BadRequestError) {
    return { status: 400, errorClass: 'bad_request', type: 'invalid_request_error', message: err.message + id };
  }
  if (err instanceof PathNotServedError) {
    return { status: 404, errorClass: 'bad_request', type: 'invalid_request_error', message: err.message };
  }
  if (err instanceof TooManyHeadersError) {
    return { status: 431, errorClass: 'bad_request', type: 'invalid_request_error', message: err.message + id };
  }
  if (err instanceof PayloadTooLargeError) {
    return { status: 413, errorClass: 'payload_too_large', type: 'invalid_request_error', message: err.message + id };
  }
  if (err instanceof UpstreamError) {
    if (err.status >= 400 && err.status < 500) {
      const said = upstreamClientMessage(err.body);
      return {
        status: err.status,
        errorClass: 'upstream_4xx',
        type: 'invalid_request_error',
        message: `${err.step} rejected the request: HTTP ${err.status}${said === undefined ? '' : `: ${said}`}${id}`,
        upstreamStatus: err.status,
      };
    }
    return { status: 502, errorClass: 'upstream_5xx', type: 'api_error', message: 'internal error' + id, upstreamStatus: err.status };
  }
  if (err instanceof UpstreamInvalidError) {
    return { status: 502, errorClass: 'upstream_invalid', type: 'api_error', message: 'internal error' + id };
  }
  if (err instanceof MediaUnavailableError) {
    return { status: 502, errorClass: 'media_unavailable', type: 'api_error', message: 'internal error' + id };
  }
  if (err instanceof TransportError) {
    return { status: 502, errorClass: 'transport', type: 'api_error', message: 'internal error' + id };
  }
  if (err instanceof CancelledError) {
    return { status: 502, errorClass: 'cancelled', type: 'api_error', message: 'internal error' + id };
  }
  return { status: 502, errorClass: 'internal', type: 'api_error', message: 'internal error' + id };
}

/** The OpenAI-style error body: `{"error":{"message","type","param","code"}}`. */
export function errorBody(c: ClassifiedError): Buffer {
  return Buffer.from(JSON.stringify({ error: { message: c.message, type: c.type, param: null, code: c.status } }));
}
