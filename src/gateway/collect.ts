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
  readonly headers: Dispatcher.ResponseData['headers'];
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

export function collect(dispatcher: Dispatcher, request: Dispatcher.DispatchOptions, opts: CollectOptions): Promise<Collected> {
  return new Promise<Collected>((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    let cap = opts.okCap;
    let status = 0;
    let headers: Dispatcher.ResponseData['headers'] = {};
    let controller: Dispatcher.DispatchController | null = null;
    let settled = false;
    let timer: NodeJS.Timeout | undefined;

    const finish = (): void => {
      settled = true;
      if (timer !== undefined) clearTimeout(timer);
      opts.signal.removeEventListener('abort', onCancel);
    };
    const done = (over: boolean): void => {
      if (settled) return;
      finish();
      const body = parts.length === 1 ? parts[0]! : Buffer.concat(parts, size);
      resolve({ status, headers, body, over });
    };
    const fail = (err: Error): void => {
      if (settled) return;
      finish();
      reject(err);
    };
    const stop = (why: 'cancelled' | 'timeout'): void => {
      if (settled) return;
      const err = new CollectAborted(why);
      fail(err);
      controller?.abort(err);
    };
    const onCancel = (): void => stop('cancelled');

    if (opts.signal.aborted) {
      reject(new CollectAborted('cancelled'));
      return;
    }
    opts.signal.addEventListener('abort', onCancel, { once: true });
    if (opts.totalTimeoutMs > 0) {
      timer = setTimeout(() => stop('timeout'), opts.totalTimeoutMs);
      // A pending call keeps the process alive through its socket; the timer alone need not.
      timer.unref();
    }

    dispatcher.dispatch(request, {
      onRequestStart(c) {
        controller = c;
        // Stopped while it waited in the pool's queue: it never goes out.
        if (settled) c.abort(STOP_READING);
      },
      onResponseStart(_c, statusCode, answered) {
        status = statusCode;
        headers = answered;
        cap = opts.okStatuses.includes(statusCode) ? opts.okCap : opts.errorCap;
      },
      onResponseData(c, chunk) {
        if (settled) return;
        if (size + chunk.length > cap) {
          parts.push(chunk.subarray(0, cap - size));
          size = cap;
          done(true);
          c.abort(STOP_READING);
          return;
        }
        parts.push(chunk);
        size += chunk.length;
      },
      onResponseEnd() {
        done(false);
      },
      onResponseError(_c, err) {
        fail(err);
      },
    });
  });
}
