/**
 * One `Process` stream: the ext_proc conversation for one HTTP request, as a state machine.
 *
 * Invariants this file owns (every other extproc module only builds or writes messages):
 * 1. Every message Envoy waits on is answered, in order: incoming messages are handled
 *    synchronously, and every answer goes through the one ordered queue of {@link Outbound}.
 * 2. The exchange is aborted at most once (`abortOnce`), and only while something of it may still
 *    be in flight: the pipeline before its decision, a relayed reply, or an answer not yet sent.
 * 3. Nothing is written after an immediate response, or after a streamed local reply is complete
 *    (the Outbound is sealed); a reply that has started is never replaced by another answer.
 * 4. No exception escapes the stream: our own failure is a 500 if Envoy still listens (`fail`).
 *
 * State: `phase` (where the request is), `reply` (a streamed local reply), the Outbound's call
 * state (open | ending | closed), and `request` (what Envoy announced of the body).
 *
 * Body modes (body-mode.ts): FULL_DUPLEX_STREAMED holds the headers reply and collects the chunks
 * (request-body.ts); BUFFERED acknowledges the headers at once and gets the body in one message;
 * anything else passes through, unless the request has no body. deliver.ts turns the decision into
 * the messages of the mode in use.
 *
 * Two bounds come from Envoy rather than the pipeline: a request whose header map leaves no room
 * for our mutation under Envoy's header-count limit is flagged on its head (header-budget.ts; the
 * pipeline answers it 431 at once, `Exchange.refused`), and a stream on which Envoy owes us the request but sends nothing for
 * `streamIdleTimeoutMs` is ended and released (idle-deadline.ts, onIdle).
 *
 * The Envoy layer knows nothing of what an exchange does: only RequestHandler, Exchange, Decision.
 */
import type { Decision, Exchange } from '../pipeline/decision';
import { resolveModes, warnUnsupportedMode, type StreamModes } from './body-mode';
import { deliver, releaseBody, type DeliveryContext, type DeliveryOutcome, type RequestShape, type Target } from './deliver';
import { exceedsHeaderBudget } from './header-budget';
import { decodeRequestHead } from './headers';
import { streamOrigin } from './origin';
import { IdleDeadline } from './idle-deadline';
import { attachSink, GRPC_DEADLINE_EXCEEDED, Outbound, type CallSink, type ProcessCall } from './outbound';
import { RequestBody } from './request-body';
import type { ProcessStreamOptions } from './stream-options';
import {
  EMPTY_REQUEST_BODY,
  EMPTY_REQUEST_HEADERS,
  EMPTY_REQUEST_TRAILERS,
  EMPTY_RESPONSE_BODY,
  EMPTY_RESPONSE_HEADERS,
  EMPTY_RESPONSE_TRAILERS,
  internalErrorResponse,
  streamedRequestChunk,
  streamedResponseChunk,
} from './responses';
import type { HttpBodyIn, HttpHeadersIn, ProcessingRequestIn } from './wire';

export type { ProcessCall } from './outbound';
export type { ProcessStreamOptions } from './stream-options';
export { ResponseTooLargeError } from './deliver';

/**
 * - head: waiting for request_headers
 * - passthrough: the request is not ours; every message is answered unchanged
 * - collecting: an exchange is waiting for its body
 * - deciding: the exchange has its body; the pipeline runs (an abort is owed if Envoy leaves)
 * - delivering: the decision is known (or the exchange gave up); it is on its way out
 * - answered: the decision was sent: nothing of this exchange is in flight any more
 */
type Phase = 'head' | 'passthrough' | 'collecting' | 'deciding' | 'delivering' | 'answered';

/**
 * A streamed local reply (streamed_immediate_response):
 * - none: none started; an immediate response may still answer
 * - relaying: its headers went out and its body is being relayed
 * - interrupted: it started and ended without completing (stream gone, or its source failed)
 * - complete: every byte went out; nothing more is written
 */
type ReplyState = 'none' | 'relaying' | 'interrupted' | 'complete';

const EMPTY = Buffer.alloc(0);
/** The abort reason of a relay whose stream ended (a string: no DOMException and stack to build). */
const STREAM_GONE = 'ext_proc stream ended';

export class ProcessStream implements CallSink {
  private modes: StreamModes | null = null;
  private phase: Phase = 'head';
  private reply: ReplyState = 'none';
  private request: RequestShape = 'body';
  private exchange: Exchange | null = null;
  private aborted = false;
  private readonly body = new RequestBody();
  private readonly out: Outbound;
  private readonly idle: IdleDeadline;
  /**
   * Fires when the stream can no longer carry a relayed reply. Made only for a relay: every stream
   * ends, and aborting a controller nobody listens to still builds its signal and a DOMException
   * (a stack trace per request on the normal path).
   */
  private gone: AbortController | null = null;
  /** The stream's trusted entry (origin.ts), handed to the pipeline with the request head. */
  private readonly origin: string | undefined;

  constructor(
    call: ProcessCall,
    private readonly opts: ProcessStreamOptions,
    private readonly onFinish: () => void,
  ) {
    this.origin = streamOrigin(call);
    this.out = new Outbound(call, opts.log, (err) => this.fail(err));
    this.idle = new IdleDeadline(opts.streamIdleTimeoutMs ?? 0, () => this.onIdle());
    attachSink(call, this);
    this.watchIdle();
  }

  // ---- the call's events (CallSink) ----

  drained(): void {
    this.out.onDrain();
  }

  cancelled(): void {
    this.onClosed('cancelled');
  }

  closed(): void {
    this.onClosed('closed');
  }

  failed(err: unknown): void {
    if (this.opts.log.isLevelEnabled('debug')) this.opts.log.debug({ err }, 'ext_proc stream error');
    this.onClosed('failed');
  }

  // ---- incoming ----

  message(req: ProcessingRequestIn): void {
    if (!this.out.isOpen()) return;
    try {
      this.modes ??= resolveModes(req.protocol_config, this.opts.fallbackBodyMode);
      this.opts.received?.(req.request ?? 'none');
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
          return this.out.enqueueSend(EMPTY_RESPONSE_HEADERS);
        case 'response_body':
          return this.onResponseBody(req.response_body ?? { body: EMPTY, end_of_stream: false });
        case 'response_trailers':
          return this.out.enqueueSend(EMPTY_RESPONSE_TRAILERS);
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
      this.out.enqueueSend(EMPTY_REQUEST_HEADERS);
      return;
    }
    const modes = this.modes!;
    const headersOnly = msg.end_of_stream === true;
    this.request = headersOnly ? 'headers_only' : 'body';
    if (modes.request === 'unsupported' && !headersOnly) {
      warnUnsupportedMode(this.opts.log, modes.requestName);
      this.passThroughHeaders();
      return;
    }
    const decoded = decodeRequestHead(msg.headers, this.origin);
    // Counted here, where Envoy's header map is known; the pipeline decides what it means.
    const over = exceedsHeaderBudget(msg.headers, this.opts.maxRequestHeaders ?? 0);
    const head = over ? { ...decoded, headerBudgetExceeded: over } : decoded;
    const exchange = this.opts.handler.begin(head);
    if (!exchange) {
      this.passThroughHeaders();
      return;
    }
    this.exchange = exchange;
    if (this.opts.log.isLevelEnabled('debug')) {
      this.opts.log.debug({ method: head.method, path: head.path, mode: modes.requestName, headersOnly }, 'ext_proc exchange started');
    }
    if (exchange.refused) {
      // Answered from the head alone: no body is read, and no step runs.
      const refused = exchange.refused;
      this.phase = 'delivering';
      this.out.enqueue(() => this.answer(refused, 'headers', null));
      return;
    }
    if (headersOnly) {
      this.startDecision(() => exchange.complete(EMPTY), 'headers', EMPTY);
      return;
    }
    // BUFFERED: Envoy sends the body only after this answer. FULL_DUPLEX: the answer is held, so
    // header mutations can depend on the body.
    if (modes.request === 'buffered') this.out.enqueueSend(EMPTY_REQUEST_HEADERS);
    this.phase = 'collecting';
  }

  private passThroughHeaders(): void {
    this.phase = 'passthrough';
    this.out.enqueueSend(EMPTY_REQUEST_HEADERS);
  }

  private onRequestBody(msg: HttpBodyIn): void {
    const body = msg.body ?? EMPTY;
    const fullDuplex = this.modes!.request === 'full_duplex';
    switch (this.phase) {
      case 'head': // request_header_mode SKIP: no head, so nothing to process
      case 'passthrough':
        this.out.enqueueSend(fullDuplex ? streamedRequestChunk(body, msg.end_of_stream) : EMPTY_REQUEST_BODY);
        return;
      case 'collecting':
        if (fullDuplex) this.collectChunk(body, msg.end_of_stream);
        else this.takeBufferedBody(body);
        return;
      default:
        // After the decision. BUFFERED owes an answer to every body message (a second one means
        // Envoy is not really in BUFFERED mode); FULL_DUPLEX owes nothing (too-large bodies, or
        // stray chunks after end_of_stream, are dropped).
        if (!fullDuplex) this.out.enqueueSend(EMPTY_REQUEST_BODY);
    }
  }

  private bodyLimit(): number {
    return Math.min(this.exchange!.maxBodyBytes, this.opts.maxBodyBytes);
  }

  private collectChunk(chunk: Buffer, endOfStream: boolean): void {
    if (!this.body.add(chunk, this.bodyLimit())) {
      this.answerTooLarge(this.body.received, 'headers');
      return;
    }
    if (endOfStream) this.finishCollecting();
  }

  private finishCollecting(): void {
    const exchange = this.exchange!;
    const collected = this.body.take(exchange.completeParts !== undefined);
    if (collected.kind === 'parts') {
      // A large body stays in the chunks it came in: no copy of the whole.
      const { parts, length } = collected;
      this.startDecision(() => exchange.completeParts!(parts, length), 'headers', parts);
      return;
    }
    this.startDecision(() => exchange.complete(collected.body), 'headers', collected.body);
  }

  /** BUFFERED: one message is the whole body, even with end_of_stream false (trailers follow). */
  private takeBufferedBody(body: Buffer): void {
    const exchange = this.exchange!;
    this.body.countWhole(body.length);
    if (body.length > this.bodyLimit()) {
      this.answerTooLarge(body.length, 'body');
      return;
    }
    this.startDecision(() => exchange.complete(body), 'body', body);
  }

  private onRequestTrailers(): void {
    const fullDuplex = this.modes!.request === 'full_duplex';
    switch (this.phase) {
      case 'head':
      case 'passthrough':
        this.out.enqueueSend(EMPTY_REQUEST_TRAILERS);
        return;
      case 'collecting':
        this.request = 'body_and_trailers';
        if (fullDuplex) {
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
        if (!fullDuplex) this.out.enqueueSend(EMPTY_REQUEST_TRAILERS);
    }
  }

  private onResponseBody(msg: HttpBodyIn): void {
    if (this.modes!.responseFullDuplex) this.out.enqueueSend(streamedResponseChunk(msg.body ?? EMPTY, msg.end_of_stream));
    else this.out.enqueueSend(EMPTY_RESPONSE_BODY);
  }

  /** The pipeline has not produced its decision yet: leaving now owes it an abort. */
  private undecided(): boolean {
    return this.exchange !== null && (this.phase === 'collecting' || this.phase === 'deciding');
  }

  /** Envoy half-closed the call (CallSink), after every message it sent before. */
  halfClosed(): void {
    if (this.out.callState === 'closed') return;
    if (this.reply === 'relaying') {
      // Envoy stops listening mid-reply only when the client went away: stop the side call now,
      // not after the worker finished generating.
      this.abortOnce('envoy closed the stream during a streamed response');
      this.stopRelay();
      this.endCall();
      return;
    }
    if (this.undecided()) {
      // Envoy will not wait for an answer any more: the client went away.
      this.abortOnce('envoy closed the stream before the request was processed');
      this.endCall();
      return;
    }
    // Everything queued is still sent; the status follows it.
    this.out.enqueue(() => this.endCall());
  }

  private onClosed(reason: string): void {
    if (!this.out.markClosed()) return;
    this.idle.stop();
    this.body.drop();
    if (this.exchange && this.phase !== 'answered') this.abortOnce(`ext_proc stream ${reason} before the answer was sent`);
    this.stopRelay();
    this.onFinish();
  }

  // ---- idle deadline ----

  /**
   * Envoy owes us the next message while the request is incomplete (no headers yet, or the body
   * still arriving). Once it is complete the wait is on our own pipeline (each side call has its
   * own bound) or on a relayed response, and after the answer on nothing at all.
   */
  private waitingOnEnvoy(): boolean {
    return this.out.isOpen() && (this.phase === 'head' || this.phase === 'collecting');
  }

  /** Arms, pushes back or clears the idle deadline; called after every message Envoy sends. */
  private watchIdle(): void {
    this.idle.watch(this.waitingOnEnvoy());
  }

  /**
   * Envoy sent nothing for the idle timeout while it owed us the request (why: idle-deadline.ts).
   * Aborted as on a cancel, ended with DEADLINE_EXCEEDED (an OK end would make Envoy forward the
   * request unprocessed), and released.
   */
  private onIdle(): void {
    if (!this.waitingOnEnvoy()) return;
    const ms = this.idle.ms;
    if (this.opts.log.isLevelEnabled('info')) {
      this.opts.log.info(
        { idle_ms: ms, phase: this.phase, received_bytes: this.body.received },
        'ext_proc stream idle: Envoy sent nothing for stream_idle_timeout; ending it',
      );
    }
    this.body.drop();
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
      if (this.phase === 'deciding') this.phase = 'delivering';
    };
    // Registered before the queue awaits it, so the phase moves on first; also keeps a rejection
    // from being reported as unhandled while earlier answers are still being written.
    pending.then(markDecided, markDecided);
    this.out.enqueue(async () => {
      const decision = await pending;
      if (!this.out.canWrite()) {
        releaseBody(decision);
        return;
      }
      await this.answer(decision, target, original);
    });
  }

  private answerTooLarge(receivedBytes: number, target: Target): void {
    const decision = this.exchange!.tooLarge(receivedBytes);
    this.phase = 'delivering';
    // The body was dropped: a forward decision here has nothing to forward (deliver() fails it).
    this.out.enqueue(() => this.answer(decision, target, null));
  }

  private async answer(decision: Decision, target: Target, original: Buffer | readonly Buffer[] | null): Promise<void> {
    let outcome: DeliveryOutcome;
    try {
      outcome = await deliver(decision, target, original, this.deliveryContext());
    } finally {
      if (this.reply === 'relaying') this.reply = 'interrupted';
    }
    switch (outcome) {
      case 'relayed':
        // The local reply is over for Envoy: nothing more is written on this stream.
        this.reply = 'complete';
        this.out.seal();
        break;
      case 'relay_failed':
        // A clean close would leave the client waiting forever; an error status makes Envoy
        // reset the client's stream, as upstream aborts the connection.
        this.endWithError('streamed response source failed');
        break;
      case 'relay_gone': // onClosed / halfClosed already aborted the exchange
      case 'sent':
        break;
    }
    this.phase = 'answered';
    // Nothing reads the exchange after this (abortOnce and undecided() only before it), and Envoy
    // keeps the stream open until the client has the whole response (with real workers, about a
    // second): a kept exchange (its context, parsed body, token ids) would outlive V8's young
    // generation and be promoted. Dropped, what outlives a scavenge per request on the local stack
    // fell from 11.9 to 6.1 KB (sampling heap profile, concurrency 1).
    this.exchange = null;
  }

  private deliveryContext(): DeliveryContext {
    const modes = this.modes!;
    return {
      out: this.out,
      log: this.opts.log,
      metadataNamespace: this.opts.metadataNamespace,
      maxResponseBodyBytes: this.opts.maxResponseBodyBytes,
      request: this.request,
      relayResponses: this.opts.streamedResponses !== false && modes.announced && modes.request === 'full_duplex',
      relayStarted: () => {
        this.reply = 'relaying';
        const gone = (this.gone = new AbortController());
        if (this.out.callState === 'closed') gone.abort(STREAM_GONE);
        return gone.signal;
      },
    };
  }

  // ---- failures ----

  /** Our own code failed: answer 500 if Envoy still listens; never let it escape the stream. */
  private fail(err: unknown): void {
    try {
      this.opts.log.error({ err }, 'ext_proc stream failed');
    } catch {
      // a broken logger must not break the stream
    }
    if (this.out.callState === 'closed') return;
    if (this.undecided()) this.abortOnce('internal error');
    if (this.reply === 'complete') return;
    if (this.reply !== 'none') {
      // The local reply has started: an immediate_response can no longer replace it.
      this.abortOnce('internal error during a streamed response');
      this.stopRelay();
      this.endWithError('internal error');
      return;
    }
    this.phase = 'answered';
    this.body.drop();
    try {
      this.out.sendLast(internalErrorResponse());
    } catch {
      this.endCall();
    }
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

  private endWithError(details: string, code?: number): void {
    if (this.out.endWithError(details, code)) this.idle.stop();
  }

  private endCall(): void {
    if (this.out.end()) this.idle.stop();
  }
}
