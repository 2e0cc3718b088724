/**
 * One side call whose answer is read whole (render, encode, prefill), on undici's dispatch API.
 *
 * Why not `pool.request()` and a read loop: request() wraps every answer in a Readable stream,
 * links the caller's AbortSignal with listeners of its own, and the body is then read through an
 * async iterator, a promise per chunk. An answer we read whole needs none of it: the chunks are
 * collected as they arrive, up to a cap, and one promise settles at the end. The total deadline is
 * one timer, the caller's signal one listener for every call on it, and no AbortController is made.
 *
 * Every way the call ends settles the promise exactly once: the answer complete, the cap passed
 * (`over`; the rest is not read and the connection is dropped), the caller's abort, the deadline,
 * or a transport error.
 */
import type { Dispatcher } from 'undici';

export interface Collected {
  readonly status: number;
  /** The answer's header names and values as received, alternating ({@link findHeader}). */
  readonly rawHeaders: readonly Buffer[];
  readonly body: Buffer;
  /** The answer had more than its cap; `body` holds the first cap bytes. */
  readonly over: boolean;
}

export interface CollectOptions {
  /** The cap on an answer with one of `okStatuses`. */
  readonly okCap: number;
  /** The cap on any other answer (an error body is only ever shown in part). */
  readonly errorCap: number;
  readonly okStatuses: readonly number[];
  /** The caller's signal: an abort ends the call with {@link CollectAborted} `cancelled`. */
  readonly signal: AbortSignal;
  /** Ends the call with {@link CollectAborted} `timeout` after this long; 0 = none. */
  readonly totalTimeoutMs: number;
}

/** Why a collected call was stopped by us rather than failing on the wire. */
export class CollectAborted extends Error {
  constructor(readonly why: 'cancelled' | 'timeout') {
    super(why === 'timeout' ? 'side call deadline passed' : 'side call cancelled');
  }
}

// Made once: the normal path builds no error (DEVELOPERS: no per-request Error on the normal path).
const STOP_READING = new Error('side call answer over its cap');

/** The timer's callback, made once: the collector rides along as the timer's argument. */
function onDeadline(c: Collector): void {
  c.stop('timeout');
}

/**
 * The first value of the header `name` (lower case) in an answer's raw name/value buffers, compared
 * byte by byte without case: no string is made of a name, and only the value found is decoded.
 * Why not a record of every header: a step reads one or two of them (side-call.ts, AnswerHeaders).
 */
export function findHeader(raw: readonly Buffer[], name: string): string | undefined {
  const n = name.length;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const b = raw[i]!;
    if (b.length !== n) continue;
    let j = 0;
    for (; j < n; j++) {
      let c = b[j]!;
      if (c >= 0x41 && c <= 0x5a) c |= 0x20;
      if (c !== name.charCodeAt(j)) break;
    }
    if (j === n) return raw[i + 1]!.toString('latin1');
  }
  return undefined;
}

/**
 * The calls in flight on each caller signal, and the one listener per signal that stops them. Why
 * not a listener per call: adding and removing a listener on Node's EventTarget (a listener map per
 * type, grown and shrunk) was about 2 % of the service's CPU in a perf profile of the deploy
 * topology, for two side calls a request on the same signal. Why a symbol-keyed slot on the signal
 * rather than a WeakMap from signal to calls: a WeakMap entry is an identity hash made on the
 * signal, an ephemeron table insert and ephemeron work at every garbage collection; the slot is one
 * property (3x cheaper in a microbenchmark, 900 -> 280 ns for a request's three calls).
 */
const IN_FLIGHT: unique symbol = Symbol('epd.side-calls-in-flight');

type TrackedSignal = AbortSignal & { [IN_FLIGHT]?: Set<Collector> };

function trackOn(signal: TrackedSignal, c: Collector): Set<Collector> {
  let calls = signal[IN_FLIGHT];
  if (calls === undefined) {
    const set = (calls = signal[IN_FLIGHT] = new Set<Collector>());
    signal.addEventListener(
      'abort',
      () => {
        for (const call of set) call.stop('cancelled');
      },
      { once: true },
    );
  }
  calls.add(c);
  return calls;
}

/**
 * One call's state and its dispatch handler in one object. A class rather than closures: a
 * closure per callback was the largest allocation of a side call in the heap profile, and every
 * request makes two or more of these.
 *
 * It implements undici's first handler interface (onConnect, onHeaders, onData, onComplete,
 * onError), which undici 7 marks deprecated but still calls on every request internally: a handler
 * of the newer interface is wrapped in an adapter (UnwrapHandler) that allocates a controller per
 * call and parses the headers and trailers into objects before handing them on.
 */
class Collector implements Dispatcher.DispatchHandler {
  private readonly parts: Buffer[] = [];
  private size = 0;
  private cap: number;
  private status = 0;
  private rawHeaders: readonly Buffer[] = [];
  private abortCall: ((err?: Error) => void) | null = null;
  private settled = false;
  private timer: NodeJS.Timeout | undefined;
  /** The calls on the caller's signal, this one among them until it settles. */
  private readonly siblings: Set<Collector>;

  constructor(
    private readonly opts: CollectOptions,
    private readonly resolve: (c: Collected) => void,
    private readonly reject: (err: Error) => void,
  ) {
    this.cap = opts.okCap;
    this.siblings = trackOn(opts.signal, this);
    if (opts.totalTimeoutMs > 0) {
      this.timer = setTimeout(onDeadline, opts.totalTimeoutMs, this);
      // A pending call keeps the process alive through its socket; the timer alone need not.
      this.timer.unref();
    }
  }

  stop(why: 'cancelled' | 'timeout'): void {
    if (this.settled) return;
    const err = new CollectAborted(why);
    this.fail(err);
    this.abortCall?.(err);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortCall = abort;
    // Stopped while it waited in the pool's queue: it never goes out.
    if (this.settled) abort(STOP_READING);
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    this.status = statusCode;
    this.rawHeaders = rawHeaders;
    this.cap = this.opts.okStatuses.includes(statusCode) ? this.opts.okCap : this.opts.errorCap;
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.settled) return true;
    if (this.size + chunk.length > this.cap) {
      this.parts.push(chunk.subarray(0, this.cap - this.size));
      this.size = this.cap;
      this.done(true);
      this.abortCall?.(STOP_READING);
      return true;
    }
    this.parts.push(chunk);
    this.size += chunk.length;
    return true;
  }

  onComplete(): void {
    this.done(false);
  }

  onError(err: Error): void {
    this.fail(err);
  }

  private finish(): void {
    this.settled = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.siblings.delete(this);
  }

  private done(over: boolean): void {
    if (this.settled) return;
    this.finish();
    const parts = this.parts;
    const body = parts.length === 1 ? parts[0]! : Buffer.concat(parts, this.size);
    this.resolve({ status: this.status, rawHeaders: this.rawHeaders, body, over });
  }

  private fail(err: Error): void {
    if (this.settled) return;
    this.finish();
    this.reject(err);
  }
}

export function collect(dispatcher: Dispatcher, request: Dispatcher.DispatchOptions, opts: CollectOptions): Promise<Collected> {
  return new Promise<Collected>((resolve, reject) => {
    if (opts.signal.aborted) {
      reject(new CollectAborted('cancelled'));
      return;
    }
    dispatcher.dispatch(request, new Collector(opts, resolve, reject));
  });
}
