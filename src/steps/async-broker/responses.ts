/**
 * The answers this step writes itself: the pending body,
 * the OpenAI-style error envelope, and a stored result mapped to HTTP.
 */
import type { StepResponse } from '../../pipeline/step';
import { MalformedResultError, parseResultMessage, type ResultMessage } from './envelope';
import { goEncode } from './go-json';

const JSON_TYPE = 'application/json';

export type ErrorType = 'invalid_request_error' | 'api_error' | 'timeout_error' | 'rate_limit_error' | 'cancelled';

function headers(requestId: string | undefined): Record<string, string> {
  const h: Record<string, string> = { 'content-type': JSON_TYPE };
  if (requestId !== undefined) h['x-request-id'] = requestId;
  return h;
}

/** `{"error":{"message","type","code"}}`; `code` is omitted when empty, as Go's `omitempty`. */
export function errorResponse(status: number, type: ErrorType, code: string, message: string, requestId?: string): StepResponse {
  const error: Record<string, string> = { message, type };
  if (code !== '') error['code'] = code;
  return { status, headers: headers(requestId), body: goEncode({ error }) };
}

/** 202 `{"id":"<id>","status":"pending"}` (keys sorted, as Go marshals a map). */
export function pendingResponse(id: string, requestId?: string): StepResponse {
  return { status: 202, headers: headers(requestId), body: goEncode({ id, status: 'pending' }) };
}

export function badRequest(message: string): StepResponse {
  return errorResponse(400, 'invalid_request_error', 'INVALID_REQUEST', message);
}

export const ENQUEUE_FAILED_MESSAGE = 'failed to enqueue request';
export const LOOKUP_FAILED_MESSAGE = 'failed to look up the request';
export const DELETE_FAILED_MESSAGE = 'failed to delete the result';
export const UNKNOWN_REQUEST_MESSAGE = 'request id is unknown, expired, or already deleted';
export const WAIT_DEADLINE_MESSAGE = 'request deadline exceeded before a result was produced';

/** Maps a stored result. Every answer is JSON; an HTTP outcome's body is the payload verbatim. */
export function resultResponse(r: ResultMessage, requestId?: string): StepResponse {
  if (r.statusCode !== 0) {
    if (r.statusCode < 100 || r.statusCode > 599) {
      return errorResponse(502, 'api_error', 'MALFORMED_RESULT', `stored result carries invalid status code ${r.statusCode}`, requestId);
    }
    return { status: r.statusCode, headers: headers(requestId), body: Buffer.from(r.payload, 'utf8') };
  }
  switch (r.errorCode) {
    case 'GATE_DROPPED':
      return errorResponse(429, 'rate_limit_error', r.errorCode, r.errorMessage, requestId);
    case 'DEADLINE_EXCEEDED':
      return errorResponse(504, 'timeout_error', r.errorCode, r.errorMessage, requestId);
    case 'INVALID_REQUEST':
      return errorResponse(400, 'invalid_request_error', r.errorCode, r.errorMessage, requestId);
    case 'CANCELLED':
      return errorResponse(499, 'cancelled', r.errorCode, r.errorMessage, requestId);
    default:
      // GATE_ERROR, INFERENCE_ERROR, unknown codes, and the tier-priority drop with no code.
      return errorResponse(502, 'api_error', r.errorCode, r.errorMessage, requestId);
  }
}

/** Parses and maps a raw mailbox entry; a malformed entry is a 502, never an exception. */
export function storedEntryResponse(raw: string, requestId?: string): StepResponse {
  try {
    return resultResponse(parseResultMessage(raw), requestId);
  } catch (err) {
    if (err instanceof MalformedResultError) return errorResponse(502, 'api_error', 'MALFORMED_RESULT', err.message, requestId);
    throw err;
  }
}

/**
 * True for a stored outcome a retry should not be re-attached to: anything but a 2xx. Serving such
 * a result again would hand a retrying client the very failure it is retrying (our fix of the
 * stale-result flaw, docs/async-broker.md).
 */
export function isFailedOutcome(raw: string): boolean {
  try {
    const r = parseResultMessage(raw);
    return !(r.statusCode >= 200 && r.statusCode <= 299);
  } catch {
    return true;
  }
}
