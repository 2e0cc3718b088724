/**
 * Builders for every ProcessingResponse this service sends. Pure functions: the state machine in
 * process-stream.ts decides which one to send and when.
 */
import type { ForwardDecision } from '../pipeline/decision';
import { HOP_BY_HOP_HEADERS } from '../pipeline/hop-by-hop';
import { buildHeaderMutation, type DroppedHeaders } from './headers';
import { envoyStatusCode } from './status';
import type { HeaderMutationOut, ProcessingResponseOut, StructOut } from './wire';

/** Envoy recommends body chunks of at most 64 KiB in FULL_DUPLEX_STREAMED mode. */
export const STREAMED_CHUNK_BYTES = 64 * 1024;

/** `%RESPONSE_CODE_DETAILS%` of our local replies. */
export const IMMEDIATE_DETAILS = 'epd_coordinator';
export const INTERNAL_ERROR_DETAILS = 'epd_coordinator_internal_error';

export const INTERNAL_ERROR_BODY = Buffer.from('{"error":{"message":"internal error","type":"api_error","param":null,"code":500}}');

/**
 * Never copied onto a local reply: Envoy frames local replies itself, so a copied length or
 * hop-by-hop header (the one list, pipeline/hop-by-hop.ts) would corrupt them. Shared with the
 * streamed local reply (streamed-response.ts).
 */
export const LOCAL_REPLY_SKIPPED_HEADERS: ReadonlySet<string> = new Set(['content-length', ...HOP_BY_HOP_HEADERS]);

// In FULL_DUPLEX_STREAMED Envoy strips content-length at header time and skips any we set.
const FULL_DUPLEX_SKIPPED_HEADERS: ReadonlySet<string> = new Set(['content-length']);
const CONTENT_LENGTH = ['content-length'] as const;

function withMetadata<T extends ProcessingResponseOut>(msg: T, metadata: StructOut | undefined): T {
  return metadata ? { ...msg, dynamic_metadata: metadata } : msg;
}

// ---- pass-through answers ----

export const EMPTY_REQUEST_HEADERS: ProcessingResponseOut = { request_headers: {} };
export const EMPTY_REQUEST_BODY: ProcessingResponseOut = { request_body: {} };
export const EMPTY_REQUEST_TRAILERS: ProcessingResponseOut = { request_trailers: {} };
export const EMPTY_RESPONSE_HEADERS: ProcessingResponseOut = { response_headers: {} };
export const EMPTY_RESPONSE_BODY: ProcessingResponseOut = { response_body: {} };
export const EMPTY_RESPONSE_TRAILERS: ProcessingResponseOut = { response_trailers: {} };

/** One FULL_DUPLEX_STREAMED body chunk on the request path. */
export function streamedRequestChunk(body: Buffer, endOfStream: boolean): ProcessingResponseOut {
  return { request_body: { response: { body_mutation: { streamed_response: { body, end_of_stream: endOfStream } } } } };
}

/** One FULL_DUPLEX_STREAMED body chunk on the response path (pass-through echo). */
export function streamedResponseChunk(body: Buffer, endOfStream: boolean): ProcessingResponseOut {
  return { response_body: { response: { body_mutation: { streamed_response: { body, end_of_stream: endOfStream } } } } };
}

// ---- forward ----

/** Bytes of a forward body, whole or in parts. */
export function forwardBodyLength(body: Buffer | readonly Buffer[]): number {
  if (Buffer.isBuffer(body)) return body.length;
  let n = 0;
  for (const part of body) n += part.length;
  return n;
}

/**
 * The FULL_DUPLEX_STREAMED messages of a forward body: each at most `max` bytes. A part of at least
 * half that is sent as subarrays of itself (a large string of the client's body is never copied);
 * runs of smaller parts (the JSON between big strings, or small chunks as Envoy streamed them) are
 * joined into one message, so the message count stays within twice the minimum.
 */
export function streamedBodyChunks(body: Buffer | readonly Buffer[], max: number = STREAMED_CHUNK_BYTES): Buffer[] {
  const parts: readonly Buffer[] = Buffer.isBuffer(body) ? [body] : body;
  const out: Buffer[] = [];
  let run: Buffer[] = [];
  let runBytes = 0;
  const flush = (): void => {
    if (runBytes > 0) out.push(run.length === 1 ? run[0]! : Buffer.concat(run, runBytes));
    run = [];
    runBytes = 0;
  };
  for (const part of parts) {
    if (part.length === 0) continue;
    if (part.length >= max / 2) {
      flush();
      for (let off = 0; off < part.length; off += max) out.push(part.subarray(off, Math.min(off + max, part.length)));
      continue;
    }
    if (runBytes + part.length > max) flush();
    run.push(part);
    runBytes += part.length;
  }
  flush();
  return out;
}

/** A forward body as one buffer: the only copy of a body in parts, for a single-message reply. */
function wholeBody(body: Buffer | readonly Buffer[]): Buffer {
  if (Buffer.isBuffer(body)) return body;
  return body.length === 1 ? body[0]! : Buffer.concat(body as Buffer[], forwardBodyLength(body));
}

/**
 * The headers reply of a forward decision: used in FULL_DUPLEX_STREAMED mode (content-length is
 * always removed, the body follows as chunks) and for a request without a body in any mode.
 * `clear_route_cache` needs a header_mutation in the same response, which is always present.
 */
export function forwardHeadersResponse(
  decision: ForwardDecision,
  opts: { removeContentLength: boolean; metadata: StructOut | undefined; dropped?: DroppedHeaders },
): ProcessingResponseOut {
  const header_mutation = buildHeaderMutation(
    {
      set: decision.setHeaders,
      remove: decision.removeHeaders,
      skip: opts.removeContentLength ? FULL_DUPLEX_SKIPPED_HEADERS : undefined,
      extraRemove: opts.removeContentLength ? CONTENT_LENGTH : undefined,
    },
    opts.dropped,
  );
  return withMetadata({ request_headers: { response: { header_mutation, clear_route_cache: true } } }, opts.metadata);
}

/**
 * The body reply of a forward decision in BUFFERED mode. Envoy checks content-length against the
 * mutated body after applying this response's header mutation, so it is set to the exact new
 * length. With no new body the client's body and content-length stay as they are.
 */
export function bufferedForwardBodyResponse(
  decision: ForwardDecision,
  opts: { metadata: StructOut | undefined; dropped?: DroppedHeaders },
): ProcessingResponseOut {
  const body = decision.body === null ? null : wholeBody(decision.body);
  const header_mutation = buildHeaderMutation(
    {
      set: decision.setHeaders,
      remove: decision.removeHeaders,
      skip: body ? FULL_DUPLEX_SKIPPED_HEADERS : undefined,
      extraSet: body ? { 'content-length': String(body.length) } : undefined,
    },
    opts.dropped,
  );
  return withMetadata(
    {
      request_body: {
        response: body
          ? { header_mutation, body_mutation: { body }, clear_route_cache: true }
          : { header_mutation, clear_route_cache: true },
      },
    },
    opts.metadata,
  );
}

// ---- respond ----

export function immediateResponse(
  status: number,
  headers: Readonly<Record<string, string>>,
  body: Buffer,
  opts: { metadata: StructOut | undefined; details?: string; dropped?: DroppedHeaders },
): ProcessingResponseOut {
  const mutation: HeaderMutationOut = buildHeaderMutation({ set: headers, skip: LOCAL_REPLY_SKIPPED_HEADERS }, opts.dropped);
  // Pseudo-headers (`:status`) cannot be set on a local reply.
  const set_headers = mutation.set_headers.filter((h) => h.header.key.charCodeAt(0) !== 58);
  return withMetadata(
    {
      immediate_response: {
        status: { code: envoyStatusCode(status) },
        headers: { set_headers, remove_headers: [] },
        body,
        details: opts.details ?? IMMEDIATE_DETAILS,
      },
    },
    opts.metadata,
  );
}

/** The answer when our own code failed: a plain OpenAI-style 500. */
export function internalErrorResponse(): ProcessingResponseOut {
  return immediateResponse(500, { 'content-type': 'application/json' }, INTERNAL_ERROR_BODY, {
    metadata: undefined,
    details: INTERNAL_ERROR_DETAILS,
  });
}
