/**
 * The FULL_DUPLEX_STREAMED answer for a `respond` decision whose body is a stream (a served
 * conditional-decode hit): one `streamed_immediate_response` that starts with the status and the
 * headers, then carries every body chunk the moment it arrives, so the client's time to first
 * token is the worker's, not the whole generation's.
 *
 * Wire (ProcessingResponse field 11, StreamedImmediateResponse):
 *   1. `headers_response`: HttpHeaders with `:status` and the response headers, end_of_stream false;
 *      the dynamic metadata rides on this first message;
 *   2. any number of `body_response` (StreamedBodyResponse, <= 64 KiB each, end_of_stream false);
 *   3. a last, empty `body_response` with end_of_stream true. A chunk is never held back to learn
 *      whether it is the last one: that would delay every token by one.
 *
 * Envoy starts a streamed local reply only in reply to request_headers. In full duplex the headers
 * reply is held until the request body is complete, so this still is that reply (checked against
 * Envoy 1.37.0 and 1.40.0). Envoy 1.36 and older do not know field 11 and answer the client 500
 * (`unhandled_message`); BUFFERED mode rejects it (500 `spurious_message`). process-stream.ts
 * therefore uses this path only when Envoy announced FULL_DUPLEX_STREAMED, and collects the body
 * into one immediate_response otherwise.
 */
import type { DroppedHeaders } from './headers';
import { isValidHeaderName, isValidHeaderValue } from './headers';
import { LOCAL_REPLY_SKIPPED_HEADERS, STREAMED_CHUNK_BYTES } from './responses';
import type { ProcessingResponseOut, StructOut } from './wire';

// Envoy frames the local reply itself (chunked): the same headers as on any local reply are
// skipped, and pseudo-headers other than our own `:status` have no place in a response.
const SKIPPED = LOCAL_REPLY_SKIPPED_HEADERS;

/** Response headers beyond this many are dropped (Envoy's own default limit is 100). */
export const MAX_STREAMED_HEADERS = 100;

const EMPTY = Buffer.alloc(0);

/** The status line Envoy will send: a real final status, else 502 (a worker never sends 1xx finals). */
export function streamedStatus(status: number): number {
  return Number.isInteger(status) && status >= 200 && status <= 599 ? status : 502;
}

interface HeaderValueOut {
  readonly key: string;
  readonly raw_value: Buffer;
}

/** The first message: status, headers (sanitised), and the request's dynamic metadata. */
export function streamedHeadersResponse(
  status: number,
  headers: Readonly<Record<string, string>>,
  opts: { metadata: StructOut | undefined; dropped?: DroppedHeaders },
): ProcessingResponseOut {
  const list: HeaderValueOut[] = [{ key: ':status', raw_value: Buffer.from(String(streamedStatus(status)), 'latin1') }];
  const seen = new Set<string>([':status']);
  for (const rawName of Object.keys(headers)) {
    const name = rawName.toLowerCase();
    if (SKIPPED.has(name) || name.charCodeAt(0) === 58 /* ':' */ || seen.has(name)) continue;
    const value = String(headers[rawName] ?? '').replace(/^[ \t]+|[ \t]+$/g, '');
    if (!isValidHeaderName(name) || !isValidHeaderValue(value) || list.length > MAX_STREAMED_HEADERS) {
      opts.dropped?.invalid.push(name);
      continue;
    }
    seen.add(name);
    list.push({ key: name, raw_value: Buffer.from(value, /^[\x00-\xff]*$/.test(value) ? 'latin1' : 'utf8') });
  }
  const msg: ProcessingResponseOut = {
    streamed_immediate_response: { headers_response: { headers: { headers: list }, end_of_stream: false } },
  };
  return opts.metadata ? { ...msg, dynamic_metadata: opts.metadata } : msg;
}

/** One body message of the streamed local reply. */
export function streamedBodyChunk(body: Buffer, endOfStream: boolean): ProcessingResponseOut {
  return { streamed_immediate_response: { body_response: { body, end_of_stream: endOfStream } } };
}

/** Where the relay writes; process-stream.ts provides it. */
export interface RelaySink {
  /** Writes one message; resolves once the transport can take more (write backpressure). */
  send(msg: ProcessingResponseOut): Promise<void>;
  /** False once nothing may be written any more (stream closed or ending). */
  writable(): boolean;
  /** Aborted the moment Envoy ends the stream (the client went away). */
  readonly gone: AbortSignal;
}

export type RelayResult =
  /** Every byte was sent and end_of_stream with it. */
  | { readonly kind: 'complete'; readonly bytes: number; readonly messages: number }
  /** Envoy ended the stream first; nothing more was sent. */
  | { readonly kind: 'gone'; readonly bytes: number }
  /** The source failed after the headers went out: the client has a truncated answer. */
  | { readonly kind: 'failed'; readonly bytes: number; readonly error: unknown };

const GONE = Symbol('gone');

function whenGone(signal: AbortSignal): Promise<typeof GONE> {
  if (signal.aborted) return Promise.resolve(GONE);
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(GONE), { once: true }));
}

/**
 * Relays `source` as body messages, re-chunked to at most `maxChunkBytes`, each sent as soon as it
 * is read. The next chunk is pulled only after the previous one was accepted, so a slow client
 * slows the worker instead of filling memory. When Envoy goes away mid-relay the wait on the
 * source is abandoned at once and the source is released (`return()`, which cancels the side call
 * it reads from).
 */
export async function relayBody(
  source: AsyncIterable<Buffer>,
  sink: RelaySink,
  maxChunkBytes: number = STREAMED_CHUNK_BYTES,
): Promise<RelayResult> {
  const iterator = source[Symbol.asyncIterator]();
  const gone = whenGone(sink.gone);
  let done = false;
  let bytes = 0;
  let messages = 0;
  try {
    for (;;) {
      if (sink.gone.aborted || !sink.writable()) return { kind: 'gone', bytes };
      const next = iterator.next();
      let step: IteratorResult<Buffer> | typeof GONE;
      try {
        step = await Promise.race([next, gone]);
      } catch (error) {
        done = true; // a source that threw is finished
        if (sink.gone.aborted) return { kind: 'gone', bytes };
        return { kind: 'failed', bytes, error };
      }
      if (step === GONE) {
        next.catch(() => undefined); // it will reject once released; nobody waits for it
        return { kind: 'gone', bytes };
      }
      if (step.done) {
        done = true;
        break;
      }
      const chunk = Buffer.isBuffer(step.value) ? step.value : Buffer.from(step.value as Uint8Array);
      for (let off = 0; off < chunk.length; off += maxChunkBytes) {
        if (!sink.writable()) return { kind: 'gone', bytes };
        const piece = chunk.subarray(off, Math.min(off + maxChunkBytes, chunk.length));
        await sink.send(streamedBodyChunk(piece, false));
        bytes += piece.length;
        messages++;
      }
    }
    if (!sink.writable()) return { kind: 'gone', bytes };
    await sink.send(streamedBodyChunk(EMPTY, true));
    return { kind: 'complete', bytes, messages: messages + 1 };
  } finally {
    if (!done) {
      // Not awaited: an async generator parked on an await finishes its return() only later.
      Promise.resolve()
        .then(() => iterator.return?.())
        .catch(() => undefined);
    }
  }
}
