/**
 * Turns one {@link Decision} into the messages that answer Envoy, for the body mode in use:
 * - forward: the headers reply (mutations, clear_route_cache, metadata), then in
 *   FULL_DUPLEX_STREAMED the body as <= 64 KiB chunks, or in BUFFERED one body reply with header
 *   and body mutations and an exact content-length;
 * - respond: one immediate_response, or, for a streamed body in announced FULL_DUPLEX_STREAMED
 *   mode, a streamed_immediate_response relayed as it arrives (streamed-response.ts).
 *
 * It only writes through the {@link Outbound} it is given; what the stream's state becomes
 * afterwards is the caller's (process-stream.ts).
 */
import type { Logger } from 'pino';
import type { Decision, ForwardDecision, RespondDecision } from '../pipeline/decision';
import { toDynamicMetadata } from './dynamic-metadata';
import type { DroppedHeaders } from './headers';
import type { Outbound } from './outbound';
import {
  EMPTY_REQUEST_TRAILERS,
  bufferedForwardBodyResponse,
  forwardBodyLength,
  forwardHeadersResponse,
  immediateResponse,
  streamedBodyChunks,
  streamedRequestChunk,
} from './responses';
import { relayBody, streamedHeadersResponse } from './streamed-response';
import type { StructOut } from './wire';

/** Which request message the decision answers. */
export type Target = 'headers' | 'body' | 'trailers';

/**
 * What Envoy announced of the request body: none (end_of_stream on the headers), a body, or a body
 * ended by trailers (then the trailers reply, not a last chunk, ends the body we send).
 */
export type RequestShape = 'headers_only' | 'body' | 'body_and_trailers';

/** A body we would have to send in one message is above the gRPC send limit. */
export class ResponseTooLargeError extends Error {
  override readonly name = 'ResponseTooLargeError';
  constructor(
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(`response body of ${bytes} bytes exceeds the ${limit}-byte message limit`);
  }
}

export interface DeliveryContext {
  readonly out: Outbound;
  readonly log: Logger;
  readonly metadataNamespace: string;
  /** The largest body we put into one message (immediate response, BUFFERED body reply). */
  readonly maxResponseBodyBytes: number;
  readonly request: RequestShape;
  /** A streamed `respond` body may go out as a streamed_immediate_response. */
  readonly relayResponses: boolean;
  /**
   * A streamed reply's headers are about to go out: from here no other answer can replace it.
   * Returns the signal that fires when the stream can no longer carry the reply.
   */
  relayStarted(): AbortSignal;
}

/**
 * - sent: the answer went out (or the call closed while it did)
 * - relayed: a streamed local reply went out whole; nothing more may be written
 * - relay_gone: the stream ended during a streamed reply
 * - relay_failed: the reply's source failed mid-body; the client has a partial response
 */
export type DeliveryOutcome = 'sent' | 'relayed' | 'relay_gone' | 'relay_failed';

const EMPTY = Buffer.alloc(0);

export async function deliver(
  decision: Decision,
  target: Target,
  original: Buffer | readonly Buffer[] | null,
  ctx: DeliveryContext,
): Promise<DeliveryOutcome> {
  const metadata = toDynamicMetadata(ctx.metadataNamespace, decision.metadata);
  const dropped: DroppedHeaders = { invalid: [] };
  let outcome: DeliveryOutcome = 'sent';
  if (decision.kind === 'respond') outcome = await sendRespond(decision, target, metadata, dropped, ctx);
  else await sendForward(decision, target, original, metadata, dropped, ctx);
  if (dropped.invalid.length > 0 && ctx.log.isLevelEnabled('warn')) {
    ctx.log.warn({ headers: dropped.invalid.slice(0, 16) }, 'ext_proc: invalid header names or values dropped from the answer');
  }
  return outcome;
}

async function sendForward(
  decision: ForwardDecision,
  target: Target,
  original: Buffer | readonly Buffer[] | null,
  metadata: StructOut | undefined,
  dropped: DroppedHeaders,
  ctx: DeliveryContext,
): Promise<void> {
  const { out, log } = ctx;
  if (target === 'trailers') {
    // A trailers reply can carry neither header nor body mutations.
    if (log.isLevelEnabled('debug')) log.debug('ext_proc: forward decision for a body-less BUFFERED request with trailers sent unchanged');
    await out.send(EMPTY_REQUEST_TRAILERS);
    return;
  }
  if (target === 'body') {
    if (decision.body === null && original === null) throw new Error('forward decision without a body after the client body was dropped');
    if (decision.body) checkResponseBodySize(forwardBodyLength(decision.body), ctx.maxResponseBodyBytes);
    await out.send(bufferedForwardBodyResponse(decision, { metadata, dropped }));
    return;
  }
  if (ctx.request === 'headers_only') {
    // No body was announced, so none can be sent (Envoy expects no body chunks).
    if (decision.body && forwardBodyLength(decision.body) > 0 && log.isLevelEnabled('debug')) {
      log.debug('ext_proc: forward body dropped for a request without a body');
    }
    await out.send(forwardHeadersResponse(decision, { removeContentLength: false, metadata, dropped }));
    return;
  }
  const body = decision.body ?? original;
  if (body === null) throw new Error('forward decision without a body after the client body was dropped');
  await out.send(forwardHeadersResponse(decision, { removeContentLength: true, metadata, dropped }));
  await streamRequestBody(body, ctx);
  if (ctx.request === 'body_and_trailers') await out.send(EMPTY_REQUEST_TRAILERS);
}

/**
 * FULL_DUPLEX_STREAMED body: <= 64 KiB chunks (see streamedBodyChunks: large parts of a body in
 * parts go out uncopied), end_of_stream on the last one only, and never when the request had
 * trailers (the trailers reply ends the body then).
 */
async function streamRequestBody(body: Buffer | readonly Buffer[], ctx: DeliveryContext): Promise<void> {
  const { out } = ctx;
  const chunks = streamedBodyChunks(body);
  const endsWithChunk = ctx.request !== 'body_and_trailers';
  if (chunks.length === 0) {
    if (endsWithChunk) await out.send(streamedRequestChunk(EMPTY, true));
    return;
  }
  for (let i = 0; i < chunks.length; i++) {
    if (!out.canWrite()) return;
    await out.send(streamedRequestChunk(chunks[i]!, endsWithChunk && i === chunks.length - 1));
  }
}

/**
 * The one place a `respond` decision becomes a message. A streamed body in announced
 * FULL_DUPLEX_STREAMED mode is relayed as it arrives (streamed_immediate_response, the reply to
 * the held request_headers); anywhere else it is collected into one immediate_response, which
 * costs the client its time to first token (BUFFERED, or an Envoy that does not announce modes).
 */
async function sendRespond(
  decision: RespondDecision,
  target: Target,
  metadata: StructOut | undefined,
  dropped: DroppedHeaders,
  ctx: DeliveryContext,
): Promise<DeliveryOutcome> {
  if (!Buffer.isBuffer(decision.body) && target === 'headers' && ctx.relayResponses) {
    return relayResponse(decision, decision.body, metadata, dropped, ctx);
  }
  const body = Buffer.isBuffer(decision.body) ? decision.body : await collectBody(decision.body, ctx);
  if (body === null) return 'sent'; // the stream closed meanwhile
  checkResponseBodySize(body.length, ctx.maxResponseBodyBytes);
  ctx.out.sendLast(immediateResponse(decision.status, decision.headers, body, { metadata, dropped }));
  return 'sent';
}

async function relayResponse(
  decision: RespondDecision,
  body: AsyncIterable<Buffer>,
  metadata: StructOut | undefined,
  dropped: DroppedHeaders,
  ctx: DeliveryContext,
): Promise<DeliveryOutcome> {
  const { out, log } = ctx;
  if (!out.canWrite()) {
    releaseBody(decision);
    return 'sent';
  }
  const gone = ctx.relayStarted();
  await out.send(streamedHeadersResponse(decision.status, decision.headers, { metadata, dropped }));
  const result = await relayBody(body, { send: (m) => out.send(m), writable: () => out.canWrite(), gone });
  switch (result.kind) {
    case 'complete':
      if (log.isLevelEnabled('debug')) {
        log.debug({ status: decision.status, bytes: result.bytes, messages: result.messages }, 'ext_proc: streamed response complete');
      }
      return 'relayed';
    case 'gone':
      return 'relay_gone';
    case 'failed':
      log.warn({ err: result.error, bytes: result.bytes }, 'streamed response failed mid-body: the client received a partial response');
      return 'relay_failed';
  }
}

async function collectBody(source: AsyncIterable<Buffer>, ctx: DeliveryContext): Promise<Buffer | null> {
  const limit = ctx.maxResponseBodyBytes;
  const parts: Buffer[] = [];
  let size = 0;
  // Leaving the loop early (return/throw) calls the iterator's return(), releasing its source.
  for await (const chunk of source) {
    if (!ctx.out.canWrite()) return null;
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    size += buf.length;
    if (size > limit) throw new ResponseTooLargeError(size, limit);
    parts.push(buf);
  }
  return Buffer.concat(parts, size);
}

function checkResponseBodySize(bytes: number, limit: number): void {
  if (bytes > limit) throw new ResponseTooLargeError(bytes, limit);
}

/** A streamed body nobody will read: release it, so the side call behind it is cancelled. */
export function releaseBody(decision: Decision): void {
  if (decision.kind !== 'respond' || Buffer.isBuffer(decision.body)) return;
  try {
    const it = decision.body[Symbol.asyncIterator]();
    Promise.resolve()
      .then(() => it.return?.())
      .catch(() => undefined);
  } catch {
    // a broken iterable has nothing to release
  }
}
