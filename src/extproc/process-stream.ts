/**
 * One `Process` stream: the ext_proc conversation for one HTTP request.
 *
 * Incoming messages are handled synchronously, in order; every state change happens there.
 * Everything we send goes through one ordered queue (`enqueue`), so answers leave in the order
 * Envoy expects even when a decision takes seconds and more messages arrive meanwhile.
 *
 * Body modes (see body-mode.ts):
 * - FULL_DUPLEX_STREAMED: hold the headers reply, collect the chunks, run the exchange, then send
 *   the headers reply (mutations, clear_route_cache, metadata) and the body as <= 64 KiB chunks. A
 *   `respond` whose body is a stream goes out as a streamed_immediate_response (streamed-response.ts):
 *   the held headers reply becomes the local reply's headers, and chunks follow as they arrive.
 * - BUFFERED: acknowledge the headers at once; the single body message carries the whole body; the
 *   body reply carries header and body mutations, with an exact content-length.
 * - anything else: pass-through, unless the request has no body.
 *
 * Two bounds are ours rather than the pipeline's: an inference request whose header map leaves no
 * room for our mutation under Envoy's header-count limit is answered 431 at once
 * (header-budget.ts), and a stream on which Envoy owes us the request but sends nothing for
 * `streamIdleTimeoutMs` is ended and released (onIdle).
 *
 * The Envoy layer knows nothing of what an exchange does: only RequestHandler, Exchange, Decision.
 */
import type * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Decision, Exchange, ForwardDecision, RequestHandler, RespondDecision } from '../pipeline/decision';
import { isInferenceRequest } from '../pipeline/inference-request';
import { sanitiseRequestId } from '../pipeline/request-id';
import { resolveModes, type FallbackBodyMode, type StreamModes } from './body-mode';
import { toDynamicMetadata } from './dynamic-metadata';
import { exceedsHeaderBudget, tooManyHeadersAnswer, TOO_MANY_HEADERS_STATUS, type HeaderCount } from './header-budget';
import { decodeRequestHead, type DroppedHeaders } from './headers';
import { streamOrigin } from './origin';
import { relayBody, streamedHeadersResponse } from './streamed-response';
import {
  EMPTY_REQUEST_BODY,
  EMPTY_REQUEST_HEADERS,
  EMPTY_REQUEST_TRAILERS,
  EMPTY_RESPONSE_BODY,
  EMPTY_RESPONSE_HEADERS,
  EMPTY_RESPONSE_TRAILERS,
  bufferedForwardBodyResponse,
  forwardBodyLength,
  forwardHeadersResponse,
  immediateResponse,
  internalErrorResponse,
  streamedBodyChunks,
  streamedRequestChunk,
  streamedResponseChunk,
} from './responses';
import type { HttpBodyIn, HttpHeadersIn, ProcessingRequestIn, ProcessingResponseOut, StructOut } from './wire';

export type ProcessCall = grpc.ServerDuplexStream<ProcessingRequestIn, ProcessingResponseOut>;

export interface ProcessStreamOptions {
  readonly handler: RequestHandler;
  /** The single dynamic-metadata namespace everything is published under. */
  readonly metadataNamespace: string;
  readonly fallbackBodyMode: FallbackBodyMode;
  readonly log: Logger;
  /**
   * The server-wide body limit. An exchange's own `maxBodyBytes` applies below it; above it a
   * FULL_DUPLEX body is never accumulated, whatever the exchange says.
   */
  readonly maxBodyBytes: number;
  /** The largest body we put into one message (immediate response, BUFFERED body reply). */
  readonly maxResponseBodyBytes: number;
  /**
   * Relay streamed `respond` bodies with a streamed_immediate_response when Envoy announced
   * FULL_DUPLEX_STREAMED (Envoy >= 1.37). Default true; false collects them (Envoy 1.34-1.36).
   */
  readonly streamedResponses?: boolean;
  /**
   * Ends a stream on which Envoy sent nothing for this long while we wait on it (before the request
   * is complete); 0 or absent = never. See {@link ProcessStream} (idle deadline).
   */
  readonly streamIdleTimeoutMs?: number;
  /**
   * Envoy's header-count limit (the listener's max_headers_count); an inference request with no
   * room left for our headers is answered 431 at once (header-budget.ts). 0 or absent = no check.
   */
  readonly maxRequestHeaders?: number;
}

/** A body we would have to send in one message is above the gRPC send limit. */
export class ResponseTooLargeError extends Error {
  override readonly name = 'ResponseTooLargeError';
  constructor(readonly bytes: number, readonly limit: number) {
    super(`response body of ${bytes} bytes exceeds the ${limit}-byte message limit`);
  }
}

/**
 * - head: waiting for request_headers
 * - passthrough: the request is not ours; every message is answered unchanged
 * - collecting: an exchange is waiting for its body
 * - deciding: the exchange has its body (or gave up on it); its decision is on the way out
 * - answered: the decision was sent
 */
type Phase = 'head' | 'passthrough' | 'collecting' | 'deciding' | 'answered';

/** Which request message the decision answers. */
type Target = 'headers' | 'body' | 'trailers';

const EMPTY = Buffer.alloc(0);
/** The abort reason of a relay whose stream ended (a string: no DOMException and stack to build). */
const STREAM_GONE = 'ext_proc stream ended';
const RESOLVED: Promise<void> = Promise.resolve();
/** grpc.status codes; the type-only grpc import keeps the runtime free of grpc-js here. */
const GRPC_INTERNAL = 13;
const GRPC_DEADLINE_EXCEEDED = 4;

// A misconfigured filter would otherwise log on every request.
const warnedModes = new Set<string>();

export class ProcessStream {
  private modes: StreamModes | null = null;
  private phase: Phase = 'head';
  private exchange: Exchange | null = null;
  private chunks: Buffer[] = [];
  private received = 0;
  private headersOnly = false;
  private hadTrailers = false;
  /** The exchange produced its decision (or failed): no abort is owed for the pipeline's sake. */
  private decided = false;
  /** The decision is out: nothing of this exchange is in flight any more. */
  private delivered = false;
  private aborted = false;
  private immediateSent = false;
  /** We called `call.end()`. */
  private ending = false;
  /** The call is over (cancelled, closed or failed). */
  private closed = false;
  private paused = false;
  /** A streamed local reply's body is being relayed. */
  private relaying = false;
  /** A streamed local reply's headers went out: no other answer can replace it any more. */
  private replyStarted = false;
  /** Aborted when Envoy ends the stream; a relay waiting on its source stops at once. */
  /**
   * Fires when the stream can no longer carry a relayed reply. Made only for a relay: every stream
   * ends, and aborting a controller nobody listens to still builds its signal and a DOMException
   * (a stack trace per request on the normal path).
   */
  private gone: AbortController | null = null;
  private chain: Promise<void> = RESOLVED;
  private drainWaiters: Array<() => void> = [];
  /** The idle deadline while we wait on Envoy (see watchIdle). */
  private idleTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly call: ProcessCall,
    private readonly opts: ProcessStreamOptions,
    private readonly onFinish: () => void,
  ) {
    call.on('data', (msg: ProcessingRequestIn) => this.onMessage(msg));
    call.on('end', () => this.onHalfClose());
    call.on('drain', () => this.onDrain());
    call.on('cancelled', () => this.onClosed('cancelled'));
    call.on('close', () => this.onClosed('closed'));
    call.on('error', (err: Error) => {
      if (this.opts.log.isLevelEnabled('debug')) this.opts.log.debug({ err }, 'ext_proc stream error');
      this.onClosed('failed');
    });
    this.watchIdle();
  }

  // ---- incoming ----

  private onMessage(req: ProcessingRequestIn): void {
    if (this.closed || this.ending) return;
    try {
      this.modes ??= resolveModes(req.protocol_config, this.opts.fallbackBodyMode);
      // Envoy ignores every answer in observability mode.
      if (req.observability_mode) return;
      switch (req.request) {
        case 'request_headers':
          return this.onRequestHeaders(req.request_headers ?? { headers: null, end_of_stream: false });
        case 'request_body':
          return this.onRequestBody(req.request_body ?? { body: EMPTY, end_of_stream: false });
        case 'request_trailers':
          return this.onRequestTrailers();
        // The response path is not ours (Envoy should be configured with response SKIP/NONE); it
        // is answered unchanged so a misconfigured filter never hangs a request.
        case 'response_headers':
          return this.enqueueSend(EMPTY_RESPONSE_HEADERS);
        case 'response_body':
          return this.onResponseBody(req.response_body ?? { body: EMPTY, end_of_stream: false });
        case 'response_trailers':
          return this.enqueueSend(EMPTY_RESPONSE_TRAILERS);
        default:
          return; // no member we know: nothing is owed
      }
    } catch (err) {
      this.fail(err);
    } finally {
      // Any message counts as Envoy being alive, and may have moved us past the wait on it.
      this.watchIdle();
    }
  }

  private onRequestHeaders(msg: HttpHeadersIn): void {
    if (this.phase !== 'head') {
      // A second request_headers is a protocol violation; answering it keeps Envoy from hanging.
      this.enqueueSend(EMPTY_REQUEST_HEADERS);
      return;
    }
    const modes = this.modes!;
    this.headersOnly = msg.end_of_stream === true;
    if (modes.request === 'unsupported' && !this.headersOnly) {
      this.warnUnsupported(modes.requestName);
      this.passThroughHeaders();
      return;
    }
    const head = decodeRequestHead(msg.headers, streamOrigin(this.call));
    if (isInferenceRequest(head.method, head.path)) {
      const over = exceedsHeaderBudget(msg.headers, this.opts.maxRequestHeaders ?? 0);
      if (over) {
        this.answerTooManyHeaders(over, head.headers['x-request-id']);
        return;
      }
    }
    const exchange = this.opts.handler.begin(head);
    if (!exchange) {
      this.passThroughHeaders();
      return;
    }
    this.exchange = exchange;
    if (this.opts.log.isLevelEnabled('debug')) {
      this.opts.log.debug({ method: head.method, path: head.path, mode: modes.requestName, headersOnly: this.headersOnly }, 'ext_proc exchange started');
    }
    if (this.headersOnly) {
      this.startDecision(() => exchange.complete(EMPTY), 'headers', EMPTY);
      return;
    }
    // BUFFERED: Envoy sends the body only after this answer. FULL_DUPLEX: the answer is held, so
    // header mutations can depend on the body.
    if (modes.request === 'buffered') this.enqueueSend(EMPTY_REQUEST_HEADERS);
    this.phase = 'collecting';
  }

  /**
   * Envoy would refuse our mutation of this request (a bare 500 after the whole pipeline ran):
   * the client's 431 now, with no exchange, so no step and no side call runs.
   */
  private answerTooManyHeaders(count: HeaderCount, clientRequestId: string | undefined): void {
    this.phase = 'answered';
    this.decided = true;
    const requestId = sanitiseRequestId(clientRequestId).id;
    if (this.opts.log.isLevelEnabled('info')) {
      this.opts.log.info({ 'x-request-id': requestId, headers: count.entries, allowed: count.allowed }, 'request has too many headers for our mutation: 431');
    }
    const answer = tooManyHeadersAnswer(count, requestId);
    const metadata = toDynamicMetadata(this.opts.metadataNamespace, answer.metadata);
    this.enqueue(() => this.sendImmediate(immediateResponse(TOO_MANY_HEADERS_STATUS, { 'content-type': 'application/json' }, answer.body, { metadata })));
  }

  private passThroughHeaders(): void {
    this.phase = 'passthrough';
    this.enqueueSend(EMPTY_REQUEST_HEADERS);
  }

  private onRequestBody(msg: HttpBodyIn): void {
    const body = msg.body ?? EMPTY;
    switch (this.phase) {
      case 'head': // request_header_mode SKIP: no head, so nothing to process
      case 'passthrough':
        if (this.modes!.request === 'full_duplex') this.enqueueSend(streamedRequestChunk(body, msg.end_of_stream));
        else this.enqueueSend(EMPTY_REQUEST_BODY);
        return;
      case 'collecting':
        if (this.modes!.request === 'full_duplex') this.collectChunk(body, msg.end_of_stream);
        else this.takeBufferedBody(body);
        return;
      default:
        // After the decision. BUFFERED owes an answer to every body message (a second one means
        // Envoy is not really in BUFFERED mode); FULL_DUPLEX owes nothing (too-large bodies, or
        // stray chunks after end_of_stream, are dropped).
        if (this.modes!.request !== 'full_duplex') this.enqueueSend(EMPTY_REQUEST_BODY);
    }
  }

  private bodyLimit(): number {
    return Math.min(this.exchange!.maxBodyBytes, this.opts.maxBodyBytes);
  }

  private collectChunk(body: Buffer, endOfStream: boolean): void {
    this.received += body.length;
    if (this.received > this.bodyLimit()) {
      this.chunks = [];
      this.answerTooLarge(this.received, 'headers');
      return;
    }
    if (body.length > 0) this.chunks.push(body);
    if (endOfStream) this.finishCollecting();
  }

  private finishCollecting(): void {
    const exchange = this.exchange!;
    const chunks = this.chunks;
    this.chunks = [];
    if (chunks.length > 1 && exchange.completeParts) {
      // A large body stays in the chunks it came in: no copy of the whole.
      const length = this.received;
      this.startDecision(() => exchange.completeParts!(chunks, length), 'headers', chunks);
      return;
    }
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.received);
    this.startDecision(() => exchange.complete(body), 'headers', body);
  }

  /** BUFFERED: one message is the whole body, even with end_of_stream false (trailers follow). */
  private takeBufferedBody(body: Buffer): void {
    const exchange = this.exchange!;
    this.received = body.length;
    if (body.length > this.bodyLimit()) {
      this.answerTooLarge(body.length, 'body');
      return;
    }
    this.startDecision(() => exchange.complete(body), 'body', body);
  }

  private onRequestTrailers(): void {
    const mode = this.modes!.request;
    switch (this.phase) {
      case 'head':
      case 'passthrough':
        this.enqueueSend(EMPTY_REQUEST_TRAILERS);
        return;
      case 'collecting':
        this.hadTrailers = true;
        if (mode === 'full_duplex') {
          // Trailers are how Envoy says the body is complete when it has trailers.
          this.finishCollecting();
        } else {
          // BUFFERED with trailers and no body message: the body is empty, and all that can be
          // answered is the trailers reply.
          const exchange = this.exchange!;
          this.startDecision(() => exchange.complete(EMPTY), 'trailers', EMPTY);
        }
        return;
      default:
        // BUFFERED: answered after the body reply (the queue keeps the order). FULL_DUPLEX:
        // trailers only come while collecting; later ones (after a too-large answer) are dropped.
        if (mode !== 'full_duplex') this.enqueueSend(EMPTY_REQUEST_TRAILERS);
    }
  }

  private onResponseBody(msg: HttpBodyIn): void {
    if (this.modes!.responseFullDuplex) this.enqueueSend(streamedResponseChunk(msg.body ?? EMPTY, msg.end_of_stream));
    else this.enqueueSend(EMPTY_RESPONSE_BODY);
  }

  private onHalfClose(): void {
    if (this.closed) return;
    if (this.relaying) {
      // Envoy stops listening mid-reply only when the client went away: stop the side call now,
      // not after the worker finished generating.
      this.abortOnce('envoy closed the stream during a streamed response');
      this.stopRelay();
      this.endCall();
      return;
    }
    if (this.exchange && !this.decided) {
      // Envoy will not wait for an answer any more: the client went away.
      this.abortOnce('envoy closed the stream before the request was processed');
      this.endCall();
      return;
    }
    // Everything queued is still sent; the status follows it.
    this.enqueue(() => this.endCall());
  }

  private onClosed(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.stopIdleWatch();
    this.chunks = [];
    if (this.exchange && !this.delivered) this.abortOnce(`ext_proc stream ${reason} before the answer was sent`);
    this.stopRelay();
    this.releaseDrainWaiters();
    this.onFinish();
  }

  // ---- idle deadline ----

  /**
   * Envoy owes us the next message while the request is incomplete (no headers yet, or the body
   * still arriving). Once it is complete the wait is on our own pipeline (each side call has its
   * own bound) or on a relayed response, and after the answer on nothing at all.
   */
  private waitingOnEnvoy(): boolean {
    return this.phase === 'head' || this.phase === 'collecting';
  }

  /** Arms, pushes back or clears the idle deadline; called after every message Envoy sends. */
  private watchIdle(): void {
    const ms = this.opts.streamIdleTimeoutMs ?? 0;
    if (ms <= 0) return;
    if (this.closed || this.ending || !this.waitingOnEnvoy()) {
      this.stopIdleWatch();
      return;
    }
    if (this.idleTimer) {
      this.idleTimer.refresh();
      return;
    }
    this.idleTimer = setTimeout(() => this.onIdle(ms), ms);
    // A server keeps the process alive; a forgotten stream must not.
    this.idleTimer.unref();
  }

  private stopIdleWatch(): void {
    if (!this.idleTimer) return;
    clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }

  /**
   * Envoy sent nothing for `ms` while it owed us the request. Either its stream is gone and grpc-js
   * never told us (grpc-js 1.14 can miss the cancel of a stream reset right after it opened), or
   * Envoy is stuck. The exchange is aborted as on a cancel, the call ends with DEADLINE_EXCEEDED,
   * and the stream is released. An error status, not a clean end: Envoy takes an OK end as "carry
   * on without the processor", which would forward an unprocessed request (fail open); an error
   * makes it answer its 500 instead (failure_mode_allow: false), if anyone is still listening.
   */
  private onIdle(ms: number): void {
    this.idleTimer = null;
    if (this.closed || this.ending || !this.waitingOnEnvoy()) return;
    if (this.opts.log.isLevelEnabled('info')) {
      this.opts.log.info({ idle_ms: ms, phase: this.phase, received_bytes: this.received }, 'ext_proc stream idle: Envoy sent nothing for stream_idle_timeout; ending it');
    }
    this.chunks = [];
    this.abortOnce(`envoy sent nothing for ${ms} ms`);
    this.endWithError('stream idle timeout: no message from Envoy', GRPC_DEADLINE_EXCEEDED);
    // grpc-js may never report the end of a stream whose peer is already gone (the case this
    // deadline exists for): release it here. A late 'close' finds it closed.
    this.onClosed('idle');
  }

  // ---- decisions ----

  private startDecision(run: () => Promise<Decision>, target: Target, original: Buffer | readonly Buffer[]): void {
    this.phase = 'deciding';
    let pending: Promise<Decision>;
    try {
      pending = Promise.resolve(run());
    } catch (err) {
      pending = Promise.reject(err);
    }
    const markDecided = (): void => {
      this.decided = true;
    };
    // Registered before the queue awaits it, so `decided` is set first; also keeps a rejection
    // from being reported as unhandled while earlier answers are still being written.
    pending.then(markDecided, markDecided);
    this.enqueue(async () => {
      const decision = await pending;
      if (!this.canWrite()) {
        releaseBody(decision);
        return;
      }
      await this.deliver(decision, target, original);
    });
  }

  private answerTooLarge(receivedBytes: number, target: Target): void {
    this.phase = 'deciding';
    const decision = this.exchange!.tooLarge(receivedBytes);
    this.decided = true;
    // The body was dropped: a forward decision here has nothing to forward (deliver() fails it).
    this.enqueue(() => this.deliver(decision, target, null));
  }

  private async deliver(decision: Decision, target: Target, original: Buffer | readonly Buffer[] | null): Promise<void> {
    const metadata = toDynamicMetadata(this.opts.metadataNamespace, decision.metadata);
    const dropped: DroppedHeaders = { invalid: [] };
    if (decision.kind === 'respond') await this.sendRespond(decision, target, metadata, dropped);
    else await this.sendForward(decision, target, original, metadata, dropped);
    this.delivered = true;
    this.phase = 'answered';
    if (dropped.invalid.length > 0 && this.opts.log.isLevelEnabled('warn')) {
      this.opts.log.warn({ headers: dropped.invalid.slice(0, 16) }, 'ext_proc: invalid header names or values dropped from the answer');
    }
  }

  private async sendForward(
    decision: ForwardDecision,
    target: Target,
    original: Buffer | readonly Buffer[] | null,
    metadata: StructOut | undefined,
    dropped: DroppedHeaders,
  ): Promise<void> {
    if (target === 'trailers') {
      // A trailers reply can carry neither header nor body mutations.
      if (this.opts.log.isLevelEnabled('debug')) this.opts.log.debug('ext_proc: forward decision for a body-less BUFFERED request with trailers sent unchanged');
      await this.send(EMPTY_REQUEST_TRAILERS);
      return;
    }
    if (target === 'body') {
      if (decision.body === null && original === null) throw new Error('forward decision without a body after the client body was dropped');
      if (decision.body) this.checkResponseBodySize(forwardBodyLength(decision.body));
      await this.send(bufferedForwardBodyResponse(decision, { metadata, dropped }));
      return;
    }
    if (this.headersOnly) {
      // No body was announced, so none can be sent (Envoy expects no body chunks).
      if (decision.body && forwardBodyLength(decision.body) > 0 && this.opts.log.isLevelEnabled('debug')) {
        this.opts.log.debug('ext_proc: forward body dropped for a request without a body');
      }
      await this.send(forwardHeadersResponse(decision, { removeContentLength: false, metadata, dropped }));
      return;
    }
    const body = decision.body ?? original;
    if (body === null) throw new Error('forward decision without a body after the client body was dropped');
    await this.send(forwardHeadersResponse(decision, { removeContentLength: true, metadata, dropped }));
    await this.streamRequestBody(body);
    if (this.hadTrailers) await this.send(EMPTY_REQUEST_TRAILERS);
  }

  /**
   * FULL_DUPLEX_STREAMED body: <= 64 KiB chunks (see streamedBodyChunks: large parts of a body in
   * parts go out uncopied), end_of_stream on the last one only, and never when the request had
   * trailers (the trailers reply ends the body then).
   */
  private async streamRequestBody(body: Buffer | readonly Buffer[]): Promise<void> {
    const chunks = streamedBodyChunks(body);
    const endsWithChunk = !this.hadTrailers;
    if (chunks.length === 0) {
      if (endsWithChunk) await this.send(streamedRequestChunk(EMPTY, true));
      return;
    }
    for (let i = 0; i < chunks.length; i++) {
      if (!this.canWrite()) return;
      await this.send(streamedRequestChunk(chunks[i]!, endsWithChunk && i === chunks.length - 1));
    }
  }

  /**
   * The one place a `respond` decision becomes a message. A streamed body in announced
   * FULL_DUPLEX_STREAMED mode is relayed as it arrives (streamed_immediate_response, the reply to
   * the held request_headers); anywhere else it is collected into one immediate_response, which
   * costs the client its time to first token (BUFFERED, or an Envoy that does not announce modes).
   */
  private async sendRespond(
    decision: RespondDecision,
    target: Target,
    metadata: StructOut | undefined,
    dropped: DroppedHeaders,
  ): Promise<void> {
    if (!Buffer.isBuffer(decision.body) && target === 'headers' && this.streamsResponses()) {
      await this.relayResponse(decision, decision.body, metadata, dropped);
      return;
    }
    const body = Buffer.isBuffer(decision.body) ? decision.body : await this.collectBody(decision.body);
    if (body === null) return; // the stream closed meanwhile
    this.checkResponseBodySize(body.length);
    this.sendImmediate(immediateResponse(decision.status, decision.headers, body, { metadata, dropped }));
  }

  private streamsResponses(): boolean {
    const modes = this.modes!;
    return this.opts.streamedResponses !== false && modes.announced && modes.request === 'full_duplex';
  }

  private async relayResponse(
    decision: RespondDecision,
    body: AsyncIterable<Buffer>,
    metadata: StructOut | undefined,
    dropped: DroppedHeaders,
  ): Promise<void> {
    if (!this.canWrite()) {
      releaseBody(decision);
      return;
    }
    this.relaying = true;
    try {
      this.replyStarted = true;
      await this.send(streamedHeadersResponse(decision.status, decision.headers, { metadata, dropped }));
      this.gone = new AbortController();
      if (this.closed) this.gone.abort(STREAM_GONE);
      const result = await relayBody(body, { send: (m) => this.send(m), writable: () => this.canWrite(), gone: this.gone.signal });
      switch (result.kind) {
        case 'complete':
          // The local reply is over for Envoy: nothing more is written on this stream.
          this.immediateSent = true;
          if (this.opts.log.isLevelEnabled('debug')) {
            this.opts.log.debug({ status: decision.status, bytes: result.bytes, messages: result.messages }, 'ext_proc: streamed response complete');
          }
          return;
        case 'gone':
          return; // onClosed / onHalfClose already aborted the exchange
        case 'failed':
          this.opts.log.warn(
            { err: result.error, bytes: result.bytes },
            'streamed response failed mid-body: the client received a partial response',
          );
          // A clean close would leave the client waiting forever; an error status makes Envoy
          // reset the client's stream, as upstream aborts the connection.
          this.endWithError('streamed response source failed');
          return;
      }
    } finally {
      this.relaying = false;
    }
  }

  private async collectBody(source: AsyncIterable<Buffer>): Promise<Buffer | null> {
    const limit = this.opts.maxResponseBodyBytes;
    const parts: Buffer[] = [];
    let size = 0;
    // Leaving the loop early (return/throw) calls the iterator's return(), releasing its source.
    for await (const chunk of source) {
      if (!this.canWrite()) return null;
      const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
      size += buf.length;
      if (size > limit) throw new ResponseTooLargeError(size, limit);
      parts.push(buf);
    }
    return Buffer.concat(parts, size);
  }

  private checkResponseBodySize(bytes: number): void {
    if (bytes > this.opts.maxResponseBodyBytes) throw new ResponseTooLargeError(bytes, this.opts.maxResponseBodyBytes);
  }

  // ---- failures ----

  /** Our own code failed: answer 500 if Envoy still listens; never let it escape the stream. */
  private fail(err: unknown): void {
    try {
      this.opts.log.error({ err }, 'ext_proc stream failed');
    } catch {
      // a broken logger must not break the stream
    }
    if (this.closed) return;
    if (this.exchange && !this.decided) this.abortOnce('internal error');
    if (this.replyStarted) {
      // The local reply has started: an immediate_response can no longer replace it.
      if (!this.immediateSent) {
        this.abortOnce('internal error during a streamed response');
        this.stopRelay();
        this.endWithError('internal error');
      }
      return;
    }
    this.decided = true;
    this.phase = 'answered';
    this.chunks = [];
    try {
      this.sendImmediate(internalErrorResponse());
    } catch {
      this.endCall();
    }
    this.delivered = true;
  }

  private stopRelay(): void {
    this.gone?.abort(STREAM_GONE);
  }

  private abortOnce(reason: string): void {
    if (this.aborted || !this.exchange) return;
    this.aborted = true;
    try {
      this.exchange.abort(reason);
    } catch (err) {
      this.opts.log.error({ err }, 'exchange.abort threw');
    }
  }

  private warnUnsupported(name: string): void {
    if (warnedModes.has(name)) return;
    warnedModes.add(name);
    this.opts.log.warn(
      { request_body_mode: name },
      'ext_proc request_body_mode is neither FULL_DUPLEX_STREAMED nor BUFFERED: requests with a body pass through unprocessed',
    );
  }

  // ---- outgoing ----

  private canWrite(): boolean {
    return !this.closed && !this.ending && !this.immediateSent;
  }

  private enqueue(job: () => Promise<void> | void): void {
    this.chain = this.chain.then(job).catch((err: unknown) => this.fail(err));
  }

  private enqueueSend(msg: ProcessingResponseOut): void {
    this.enqueue(() => this.send(msg));
  }

  /** Writes one message; waits for 'drain' when grpc-js says its buffer is full. */
  private send(msg: ProcessingResponseOut): Promise<void> {
    if (!this.canWrite()) return RESOLVED;
    if (this.call.write(msg)) return RESOLVED;
    return this.waitDrain();
  }

  /** An immediate response ends the request for Envoy: nothing is written after it. */
  private sendImmediate(msg: ProcessingResponseOut): void {
    if (!this.canWrite()) return;
    this.immediateSent = true;
    this.delivered = true;
    this.call.write(msg);
  }

  private waitDrain(): Promise<void> {
    // Stop reading while Envoy does not read: pass-through echo must not buffer without bound.
    if (!this.paused) {
      this.paused = true;
      this.call.pause();
    }
    return new Promise<void>((resolve) => this.drainWaiters.push(resolve));
  }

  private onDrain(): void {
    if (this.paused) {
      this.paused = false;
      this.call.resume();
    }
    this.releaseDrainWaiters();
  }

  private releaseDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Ends the call with an error status (INTERNAL: Envoy resets the client's stream, a truncated answer). */
  private endWithError(details: string, code: number = GRPC_INTERNAL): void {
    if (this.closed || this.ending) return;
    this.ending = true;
    this.stopIdleWatch();
    try {
      this.call.emit('error', { code, details });
    } catch (err) {
      this.opts.log.error({ err }, 'ext_proc: failing the call failed');
    }
  }

  private endCall(): void {
    if (this.closed || this.ending) return;
    this.ending = true;
    this.stopIdleWatch();
    try {
      this.call.end();
    } catch (err) {
      this.opts.log.error({ err }, 'ext_proc: ending the call failed');
    }
  }
}

/** A streamed body nobody will read: release it, so the side call behind it is cancelled. */
function releaseBody(decision: Decision): void {
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
