/**
 * One `Process` call served on a node:http2 stream without grpc-js (why: lean-transport.ts).
 *
 * To ProcessStream it is what grpc-js's ServerDuplexStream is (outbound.ts, ProcessCall), with its
 * events as direct calls on one sink (CallSink): each decoded message, Envoy's half-close (after
 * every message before it), 'drain', `cancelled` when the stream is reset or its session goes before
 * our status went out, `closed` once the call is over; `emit('error', {code, details})` ends it with
 * that status (and tells the sink, as grpc-js's 'error' listeners hear it), `end()` with OK, both
 * after every message written before. On the wire: gRPC framing (grpc-framing.ts), no compression
 * (a compressed message ends the call), the limits of `messageLimits()`, `grpc-timeout` honoured,
 * trailers-only when nothing was written.
 */
import * as http2 from 'node:http2';
import { FrameReader, frameMessage, type Frame } from './grpc-framing';
import type { CallMetadata, CallSink, SinkCall } from './outbound';
import type { ProcessingRequestIn, ProcessingResponseOut } from './wire';

/** The grpc.status codes this file answers with (no runtime grpc-js import here). */
export const GrpcStatus = {
  OK: 0,
  UNKNOWN: 2,
  DEADLINE_EXCEEDED: 4,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
} as const;

/** The message codec: exactly the objects grpc-js's proto-loader deserializer builds (proto.ts). */
export interface ProcessCodec {
  decode(message: Buffer): ProcessingRequestIn;
  encode(msg: ProcessingResponseOut): Uint8Array;
}

export interface LeanCallOptions {
  readonly codec: ProcessCodec;
  /** `grpc.max_receive_message_length` (messageLimits). */
  readonly receiveBytes: number;
  /** `grpc.max_send_message_length` (messageLimits). */
  readonly sendBytes: number;
}

/**
 * - open: messages flow both ways
 * - ending: our status waits behind the messages written so far
 * - over: the status went out, or the stream was reset or its session closed
 */
type State = 'open' | 'ending' | 'over';

const RESPONSE_HEADERS = Object.freeze({ ':status': 200, 'content-type': 'application/grpc', 'grpc-accept-encoding': 'identity' });
/** Trailers follow the messages; no `date` header (nobody reads it on a gRPC stream). */
const STREAMING = Object.freeze({ waitForTrailers: true, sendDate: false });
const TRAILERS_ONLY = Object.freeze({ endStream: true, sendDate: false });
const OK_TRAILERS = Object.freeze({ 'grpc-status': '0', 'grpc-message': 'OK' });

/** grpc-timeout: up to 8 digits and a unit (PROTOCOL-HTTP2.md). */
const TIMEOUT = /^(\d{1,8})([HMSmun])$/;
const UNIT_MS: Readonly<Record<string, number>> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };
/** Node fires a longer setTimeout at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

function trailers(code: number, details: string): http2.OutgoingHttpHeaders {
  return code === GrpcStatus.OK ? OK_TRAILERS : { 'grpc-status': String(code), 'grpc-message': encodeURI(details) };
}

/** The call's request metadata: raw header values, as grpc-js's Metadata holds a text key (origin.ts reads one). */
class HeaderMetadata implements CallMetadata {
  constructor(private headers: http2.IncomingHttpHeaders | null) {}

  get(key: string): readonly string[] {
    const v = this.headers?.[key];
    if (v === undefined) return [];
    return Array.isArray(v) ? v : [v];
  }

  /** The call is over: nothing reads them any more (see LeanCall.over). */
  release(): void {
    this.headers = null;
  }
}

/** Until ProcessStream attaches (the same turn the call is made), what happens is dropped. */
const DETACHED: CallSink = {
  message: () => undefined,
  halfClosed: () => undefined,
  drained: () => undefined,
  cancelled: () => undefined,
  closed: () => undefined,
  failed: () => undefined,
};

/** The stream's slot for its call, until the call is over. */
const CALL: unique symbol = Symbol('epd.lean-call');
type CallStream = http2.ServerHttp2Stream & { [CALL]?: LeanCall | null };

export class LeanCall implements SinkCall {
  readonly metadata: HeaderMetadata;
  private sink: CallSink = DETACHED;
  private state: State = 'open';
  private headersSent = false;
  private paused = false;
  private halfClosed = false;
  private endEmitted = false;
  /** Messages decoded while reading was paused, delivered on resume. */
  private held: ProcessingRequestIn[] = [];
  private readonly reader: FrameReader;
  private readonly encoding: string | undefined;
  private deadline: NodeJS.Timeout | null = null;
  private readonly onFrame = (frame: Frame): boolean => this.take(frame);
  /** Writes are held until {@link flush}, once the microtasks running now are done. */
  private corked = false;
  /** The response headers go out with the first flush, in the same write(2) as the messages. */
  private respondPending = false;
  private flush(): void {
    if (!this.corked) return;
    this.corked = false;
    try {
      if (this.respondPending) {
        this.respondPending = false;
        this.stream.respond(RESPONSE_HEADERS, STREAMING);
      }
      this.stream.uncork();
    } catch {
      // The stream is gone (its 'close' is on the way).
      this.over(true);
    }
  }

  /**
   * The stream's listeners: the same four functions for every stream, which find the call in a
   * slot on the stream (`this` is the stream). Why not a closure per listener: four objects per
   * request, and closures keep the call reachable from the stream after it is over (see over()).
   */
  private static onStreamData(this: CallStream, chunk: Buffer): void {
    this[CALL]?.onData(chunk);
  }

  private static onStreamEnd(this: CallStream): void {
    const call = this[CALL];
    if (!call) return;
    call.halfClosed = true;
    call.maybeEnd();
  }

  private static onStreamDrain(this: CallStream): void {
    this[CALL]?.sink.drained();
  }

  /** Closed before our status went out: reset by Envoy, or its session went. */
  private static onStreamClose(this: CallStream): void {
    this[CALL]?.over(true);
  }

  /** The deferred flush of a call's corked writes (process.nextTick's argument: no closure per call). */
  private static flushLater(call: LeanCall): void {
    call.flush();
  }

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    headers: http2.IncomingHttpHeaders,
    private readonly opts: LeanCallOptions,
    /** Told once, when the call is over (the transport's set of open calls). */
    private readonly onOver: (call: LeanCall) => void,
  ) {
    this.metadata = new HeaderMetadata(headers);
    this.encoding = typeof headers['grpc-encoding'] === 'string' ? headers['grpc-encoding'] : undefined;
    this.reader = new FrameReader(opts.receiveBytes);
    (stream as CallStream)[CALL] = this;
    stream.on('data', LeanCall.onStreamData);
    stream.on('end', LeanCall.onStreamEnd);
    stream.on('drain', LeanCall.onStreamDrain);
    stream.on('close', LeanCall.onStreamClose);
    const timeout = headers['grpc-timeout'];
    if (typeof timeout === 'string') this.armDeadline(timeout);
  }

  attach(sink: CallSink): void {
    this.sink = sink;
  }

  /**
   * As on grpc-js's ServerDuplexStream: an 'error' emitted on the call ends it with that status,
   * and its listeners (here the sink) hear it.
   */
  emit(_event: 'error', status: { code?: number; details?: string }): boolean {
    const sink = this.sink;
    this.finish(status.code ?? GrpcStatus.INTERNAL, status.details ?? '');
    sink.failed(status);
    return true;
  }

  // ---- ProcessCall ----

  /** Sends one message; false when the stream's buffer is full ('drain' follows). */
  write(msg: ProcessingResponseOut): boolean {
    if (this.state !== 'open') return true;
    let bytes: Uint8Array;
    try {
      bytes = this.opts.codec.encode(msg);
    } catch {
      this.finish(GrpcStatus.INTERNAL, 'Error serializing response');
      return true;
    }
    if (bytes.length > this.opts.sendBytes) {
      this.finish(GrpcStatus.RESOURCE_EXHAUSTED, `Sent message larger than max (${bytes.length} vs. ${this.opts.sendBytes})`);
      return true;
    }
    try {
      // Node's http2 stream makes every write its own DATA frame and its own write(2), each a
      // wake-up of Envoy: the headers reply and the body reply that follows it (deliver.ts, an
      // await apart) took two. Held until the microtasks running now are done (a nextTick queued
      // from a microtask runs once the whole queue has drained), they leave as one, with the
      // response headers, which wait too (nothing may be written before them: flush responds,
      // then uncorks). Why not setImmediate, as before: the session sends what was written from a
      // native immediate, which runs before the JavaScript ones; a flush in the check phase left
      // the answer for the next turn of the event loop, behind that turn's log batch too.
      if (!this.headersSent) {
        this.headersSent = true;
        this.respondPending = true;
      }
      if (!this.corked) {
        this.corked = true;
        this.stream.cork();
        process.nextTick(LeanCall.flushLater, this);
      }
      return this.stream.write(frameMessage(bytes));
    } catch {
      // The stream is gone (its 'close' is on the way).
      this.over(true);
      return true;
    }
  }

  /** Ends the call with OK after every message written so far. */
  end(): void {
    this.finish(GrpcStatus.OK, 'OK');
  }

  pause(): this {
    if (!this.paused) {
      this.paused = true;
      this.stream.pause();
    }
    return this;
  }

  resume(): this {
    if (!this.paused) return this;
    this.paused = false;
    while (!this.paused && this.state === 'open' && this.held.length > 0) this.sink.message(this.held.shift()!);
    if (!this.paused) this.stream.resume();
    this.maybeEnd();
    return this;
  }

  // ---- for the transport ----

  /** Resets the stream (CANCEL) and reports the call cancelled now (shutdown). */
  cancel(): void {
    if (this.state === 'over') return;
    try {
      this.stream.close(http2.constants.NGHTTP2_CANCEL);
    } catch {
      // already destroyed
    }
    this.over(true);
  }

  // ---- incoming ----

  private onData(chunk: Buffer): void {
    if (this.state !== 'open') return;
    const oversize = this.reader.push(chunk, this.onFrame);
    if (oversize !== undefined) this.finish(GrpcStatus.RESOURCE_EXHAUSTED, oversize);
  }

  private take(frame: Frame): boolean {
    if (this.state !== 'open') return false;
    if (frame.compressed) {
      // We advertise identity only; Envoy never compresses ext_proc messages.
      const e = this.encoding;
      if (e === undefined || e === 'identity') this.finish(GrpcStatus.INTERNAL, 'compressed flag set on a message without grpc-encoding');
      else this.finish(GrpcStatus.UNIMPLEMENTED, `Received message compressed with unsupported encoding "${e}"`);
      return false;
    }
    let msg: ProcessingRequestIn;
    try {
      msg = this.opts.codec.decode(frame.message);
    } catch {
      this.finish(GrpcStatus.INTERNAL, 'Error deserializing request');
      return false;
    }
    if (this.paused || this.held.length > 0) this.held.push(msg);
    else this.sink.message(msg);
    return this.state === 'open';
  }

  /** Envoy's half-close reaches ProcessStream after every message sent before it. */
  private maybeEnd(): void {
    if (!this.halfClosed || this.endEmitted || this.held.length > 0 || this.state !== 'open') return;
    this.endEmitted = true;
    this.sink.halfClosed();
  }

  private armDeadline(value: string): void {
    const m = TIMEOUT.exec(value);
    if (!m) {
      // After the constructor: the caller has not listened yet.
      process.nextTick(() => this.finish(GrpcStatus.INTERNAL, `Invalid grpc-timeout value "${value}"`));
      return;
    }
    const ms = Math.min(Math.ceil(Number(m[1]) * UNIT_MS[m[2]!]!), MAX_TIMER_MS);
    this.deadline = setTimeout(() => this.finish(GrpcStatus.DEADLINE_EXCEEDED, 'Deadline exceeded'), ms);
  }

  // ---- the end ----

  /** Queues our status behind what was written; what Envoy still sends is read and dropped. */
  private finish(code: number, details: string): void {
    if (this.state !== 'open') return;
    this.state = 'ending';
    this.clearDeadline();
    this.reader.drop();
    this.held = [];
    // A paused stream would stop the session's flow control for what Envoy still sends.
    this.paused = false;
    const stream = this.stream;
    try {
      stream.resume();
      if (!this.headersSent) {
        this.headersSent = true;
        stream.respond({ ...RESPONSE_HEADERS, ...trailers(code, details) }, TRAILERS_ONLY);
        this.over(false);
        return;
      }
      // The headers and the messages first; then end() sends the trailers after them.
      this.flush();
      stream.once('wantTrailers', () => {
        try {
          stream.sendTrailers(trailers(code, details));
        } catch {
          // reset meanwhile: its 'close' reports it
        }
        this.over(false);
      });
      stream.end();
    } catch {
      this.over(true);
    }
  }

  private over(cancelled: boolean): void {
    if (this.state === 'over') return;
    this.state = 'over';
    this.clearDeadline();
    this.held = [];
    const sink = this.sink;
    // Node's native stream handle keeps the stream's JS objects until a full collection, so what
    // they reach when the call ends survives every scavenge till then and is promoted to the old
    // generation. The stream reaches the call only through its slot, emptied here; and the call
    // lets go of the request's state (ProcessStream and all below it), its headers and a half-read
    // message, for whatever still holds it (a queued flush, the transport until onOver).
    (this.stream as CallStream)[CALL] = null;
    this.sink = DETACHED;
    this.metadata.release();
    this.reader.drop();
    if (cancelled) sink.cancelled();
    this.onOver(this);
    sink.closed();
  }

  private clearDeadline(): void {
    if (this.deadline === null) return;
    clearTimeout(this.deadline);
    this.deadline = null;
  }
}
