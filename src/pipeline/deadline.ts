/**
 * A signal that aborts when its parent does or when `ms` have passed, whichever comes first.
 *
 * Why not `AbortSignal.any([parent, AbortSignal.timeout(ms)])`: on Node 20 the combined signal
 * holds its sources weakly, and nothing else holds a timeout signal that has no listener of its
 * own. A garbage collection between the start and the deadline drops the timeout, and the deadline
 * never fires (a prefill trickling its body was waited on to the end). Here the timer and the
 * parent's listener hold the controller, so the deadline cannot be collected while it is pending.
 */
export interface Deadline {
  readonly signal: AbortSignal;
  /** True once the time ran out (false when the parent aborted first). */
  readonly timedOut: boolean;
  /** Stops the timer and detaches from the parent. Call it when the guarded work is done. */
  dispose(): void;
}

export function deadline(parent: AbortSignal, ms: number): Deadline {
  const controller = new AbortController();
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  const onParentAbort = (): void => {
    dispose();
    controller.abort(parent.reason);
  };
  const dispose = (): void => {
    if (timer) clearTimeout(timer);
    timer = undefined;
    parent.removeEventListener('abort', onParentAbort);
  };
  if (parent.aborted) {
    controller.abort(parent.reason);
  } else {
    parent.addEventListener('abort', onParentAbort, { once: true });
    timer = setTimeout(() => {
      timedOut = true;
      dispose();
      controller.abort(new DOMException(`deadline of ${ms} ms passed`, 'TimeoutError'));
    }, ms);
    // A pending call keeps the process alive through its socket; the timer alone need not.
    timer.unref();
  }
  return {
    signal: controller.signal,
    get timedOut() {
      return timedOut;
    },
    dispose,
  };
}
