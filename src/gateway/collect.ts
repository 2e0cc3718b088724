/**
 * One side call whose answer is read whole (render, encode, prefill), on undici's dispatch API.
 *
 * Why not `pool.request()` and a read loop: request() wraps every answer in a Readable stream,
 * links the caller's AbortSignal with listeners of its own, and the body is then read through an
 * async iterator, a promise per chunk. An answer we read whole needs none of it: the chunks are
 * collected as they arrive, up to a cap, and one promise settles at the end. The caller's signal
 * and the total deadline share one listener and one timer, and no AbortController is made.
 *
 * Every way the call ends settles the promise exactly once: the answer complete, the cap passed
 * (`over`; the rest is not read and the connection is dropped), the caller's abort, the deadline,
 * or a transport error.
 */
import type { Dispatcher } from 'undici';

export interface Collected {
  readonly status: number;
  /** Lower-case names, the first value of a repeated one ({@link answerHeaders}). */
  readonly headers: Record<string, string>;
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
 * An answer's headers as the steps read them: lower-case names, the first value of a repeated one.
 * Built straight from the raw name/value buffers: undici's own parse (parseHeaders) makes an object
 * with arrays for repeats, which was then flattened into a second one, for each side call.
 */
export function answerHeaders(raw: readonly Buffer[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = headerName(raw[i]!.toString('latin1'));
    // `__proto__` would set the object's prototype; no header of any use has that name.
    if (name === '__proto__' || Object.hasOwn(out, name)) continue;
    out[name] = raw[i + 1]!.toString('latin1');
  }
  return out;
}

/**
 * Header names seen before, as received -> lower case, each one string that has served as a
 * property key. Why: a name fresh from its buffer is lower-cased again and looked up in V8's string
 * table on every store into the headers object, behind a megamorphic store. In perf profiles at
 * concurrency 8 that was 1.7 % of the service's CPU on the local stack and 3.2 % in the compare
 * bench's deploy topology; with the cache, 175 -> 115 samples per 4,000 requests on the local stack
 * (about 3 µs a request). The same dozen names come back on every answer. Bounded: past
 * MAX_CACHED_NAMES new names are lower-cased each time, as before.
 */
const NAMES = new Map<string, string>();
const MAX_CACHED_NAMES = 256;

function headerName(received: string): string {
  const known = NAMES.get(received);
  if (known !== undefined) return known;
  const name = received.toLowerCase();
  if (NAMES.size < MAX_CACHED_NAMES) NAMES.set(received, name);
  return name;
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
  /** The listener on the caller's signal, removed when the call settles. */
  readonly onCancel = (): void => this.stop('cancelled');

  constructor(
    private readonly opts: CollectOptions,
    private readonly resolve: (c: Collected) => void,
    private readonly reject: (err: Error) => void,
  ) {
    this.cap = opts.okCap;
    opts.signal.addEventListener('abort', this.onCancel, { once: true });
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
    this.opts.signal.removeEventListener('abort', this.onCancel);
  }

  private done(over: boolean): void {
    if (this.settled) return;
    this.finish();
    const parts = this.parts;
    const body = parts.length === 1 ? parts[0]! : Buffer.concat(parts, this.size);
    this.resolve({ status: this.status, headers: answerHeaders(this.rawHeaders), body, over });
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
