/**
 * The writing half of one `Process` call: send ordering, backpressure, and how the call ends.
 *
 * Every answer goes through one ordered queue ({@link Outbound.enqueue}), so answers leave in the
 * order Envoy expects even when a decision takes seconds and more messages arrive meanwhile. When
 * the call says its buffer is full, reading stops until 'drain' (a pass-through echo must not buffer
 * without bound). Once the final message of a local reply is out ({@link Outbound.seal}), or the
 * call is ending or closed, every write is a no-op.
 */
import type { Logger } from 'pino';
import type { ProcessingRequestIn, ProcessingResponseOut } from './wire';

/** A call's request metadata, read as grpc-js's `Metadata.get` reads it (origin.ts). */
export interface CallMetadata {
  get(key: string): ReadonlyArray<string | Buffer>;
}

/**
 * Where a call delivers what happens on it: each message, Envoy's half-close (after every message
 * before it), 'drain' after a `write` returned false, a reset or lost session before our status went
 * out (`cancelled`, then `closed`), and the end of the call (`closed`). ProcessStream is one.
 */
export interface CallSink {
  message(msg: ProcessingRequestIn): void;
  halfClosed(): void;
  drained(): void;
  cancelled(): void;
  closed(): void;
  /** The call failed (grpc-js's 'error'; on the lean call, our own `emit('error')`). */
  failed(err: unknown): void;
}

/** What ProcessStream and Outbound use of one `Process` call, whatever the transport. */
interface CallBase {
  readonly metadata: CallMetadata;
  write(msg: ProcessingResponseOut): boolean;
  end(): void;
  pause(): unknown;
  resume(): unknown;
  /** Ends the call with that status, after every message written before. */
  emit(event: 'error', status: { code: number; details: string }): boolean;
}

/** grpc-js's ServerDuplexStream: events 'data', 'end', 'drain', 'cancelled', 'close', 'error'. */
export interface EventedCall extends CallBase {
  on(event: 'data', listener: (msg: ProcessingRequestIn) => void): unknown;
  on(event: 'end' | 'drain' | 'cancelled' | 'close', listener: () => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
}

/**
 * The lean call (lean-call.ts): it calls its one sink's methods directly. Why not events: an
 * EventEmitter per call, six listener closures and an emit per message were a per-request cost on
 * the hot path, for one listener each.
 */
export interface SinkCall extends CallBase {
  attach(sink: CallSink): void;
}

/** Both transports satisfy it as they are: grpc-js's ServerDuplexStream, and lean-call.ts. */
export type ProcessCall = EventedCall | SinkCall;

/** Hands a call's events to `sink`: the lean call calls it directly, grpc-js's call through six listeners. */
export function attachSink(call: ProcessCall, sink: CallSink): void {
  if ('attach' in call) {
    call.attach(sink);
    return;
  }
  call.on('data', (msg: ProcessingRequestIn) => sink.message(msg));
  call.on('end', () => sink.halfClosed());
  call.on('drain', () => sink.drained());
  call.on('cancelled', () => sink.cancelled());
  call.on('close', () => sink.closed());
  call.on('error', (err: Error) => sink.failed(err));
}

/**
 * - open: we may write
 * - ending: we called `end()` or failed the call; the status is on its way
 * - closed: the call is over (cancelled, closed or failed)
 */
export type CallState = 'open' | 'ending' | 'closed';

const RESOLVED: Promise<void> = Promise.resolve();
/** grpc.status codes (no grpc-js import here). */
export const GRPC_INTERNAL = 13;
export const GRPC_DEADLINE_EXCEEDED = 4;

export class Outbound {
  private state: CallState = 'open';
  /** The final message of a local reply went out: nothing more is written on this call. */
  private sealed = false;
  private paused = false;
  private chain: Promise<void> = RESOLVED;
  private drainWaiters: Array<() => void> = [];

  constructor(
    private readonly call: ProcessCall,
    private readonly log: Logger,
    /** A queued job threw: the stream's failure path. */
    private readonly onJobFailed: (err: unknown) => void,
  ) {}

  get callState(): CallState {
    return this.state;
  }

  isOpen(): boolean {
    return this.state === 'open';
  }

  canWrite(): boolean {
    return this.state === 'open' && !this.sealed;
  }

  /** Runs `job` after everything queued before it. */
  enqueue(job: () => Promise<void> | void): void {
    this.chain = this.chain.then(job).catch((err: unknown) => this.onJobFailed(err));
  }

  enqueueSend(msg: ProcessingResponseOut): void {
    this.enqueue(() => this.send(msg));
  }

  /** Writes one message; waits for 'drain' when the call says its buffer is full. */
  send(msg: ProcessingResponseOut): Promise<void> {
    if (!this.canWrite()) return RESOLVED;
    if (this.call.write(msg)) return RESOLVED;
    return this.waitDrain();
  }

  /** Writes the last message of a local reply (an immediate response); nothing is written after it. */
  sendLast(msg: ProcessingResponseOut): boolean {
    if (!this.canWrite()) return false;
    this.sealed = true;
    this.call.write(msg);
    return true;
  }

  /** The local reply is complete (a streamed one): nothing more is written. */
  seal(): void {
    this.sealed = true;
  }

  onDrain(): void {
    if (this.paused) {
      this.paused = false;
      this.call.resume();
    }
    this.releaseDrainWaiters();
  }

  /** The call is over: pending sends resolve, nothing more is written. False if it already was. */
  markClosed(): boolean {
    if (this.state === 'closed') return false;
    this.state = 'closed';
    this.releaseDrainWaiters();
    return true;
  }

  /** Ends the call with an error status (INTERNAL: Envoy resets the client's stream, a truncated answer). */
  endWithError(details: string, code: number = GRPC_INTERNAL): boolean {
    if (this.state !== 'open') return false;
    this.state = 'ending';
    try {
      this.call.emit('error', { code, details });
    } catch (err) {
      this.log.error({ err }, 'ext_proc: failing the call failed');
    }
    return true;
  }

  /** Ends the call with OK after everything written so far. */
  end(): boolean {
    if (this.state !== 'open') return false;
    this.state = 'ending';
    try {
      this.call.end();
    } catch (err) {
      this.log.error({ err }, 'ext_proc: ending the call failed');
    }
    return true;
  }

  private waitDrain(): Promise<void> {
    if (!this.paused) {
      this.paused = true;
      this.call.pause();
    }
    return new Promise<void>((resolve) => this.drainWaiters.push(resolve));
  }

  private releaseDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
