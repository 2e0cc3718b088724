/**
 * The wait-mode hold: keep the request open until its result lands,
 * its deadline passes, the wait cap ends it, or the client goes away.
 */
import type { Logger } from 'pino';
import { CancelledError } from '../../pipeline/errors';
import type { StepResponse } from '../../pipeline/step';
import { keyspaceChannel, type RequestKeys } from './keys';
import { errorResponse, pendingResponse, storedEntryResponse, WAIT_DEADLINE_MESSAGE } from './responses';
import type { BrokerStore, RequestState } from './store';
import type { Subscription, Wakeup } from './wakeup';

export interface HoldInput {
  readonly store: BrokerStore;
  readonly wakeup: Wakeup;
  readonly keys: RequestKeys;
  readonly db: number;
  /** Client-visible id: the pending body and the `x-request-id` response header. */
  readonly id: string;
  /** The request's timeout; the hold ends with 504 semantics when it runs out. */
  readonly timeoutMs: number;
  /** `wait_cap_seconds` in ms, 0 for none; a cap shorter than the timeout ends the hold with 202. */
  readonly capMs: number;
  readonly signal: AbortSignal;
  readonly log: Logger;
}

/** Wakes a sleeping hold early: a notification, or the client going away. */
class Waker {
  private pending = false;
  private resolve: (() => void) | undefined;

  wake = (): void => {
    this.pending = true;
    const r = this.resolve;
    this.resolve = undefined;
    r?.();
  };

  sleep(ms: number): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.resolve = undefined;
        resolve();
      }, ms);
      this.resolve = () => {
        clearTimeout(timer);
        this.pending = false;
        resolve();
      };
    });
  }
}

/** Cancels the queued request after the client left (fresh, bounded; best effort). */
async function cancelAfterDisconnect(input: HoldInput): Promise<never> {
  try {
    const marked = await input.store.cancel(input.keys);
    input.log.info({ marked }, 'async-broker: client went away during wait; request cancelled');
  } catch (err) {
    input.log.warn({ err: (err as Error).message }, 'async-broker: cancel after client disconnect failed');
  }
  throw new CancelledError();
}

/**
 * Delivers a stored result. The mailbox is deleted unless the client is already gone, in which
 * case the result stays for a later GET or a retry with the same id.
 */
async function deliver(input: HoldInput, raw: string): Promise<StepResponse> {
  const response = storedEntryResponse(raw, input.id);
  if (!input.signal.aborted) {
    await input.store.deleteKey(input.keys.mailbox).catch((err: Error) => {
      input.log.warn({ err: err.message }, 'async-broker: deleting the delivered mailbox failed; it expires with the result TTL');
    });
  }
  return response;
}

function timeoutResponse(id: string): StepResponse {
  return errorResponse(504, 'timeout_error', 'DEADLINE_EXCEEDED', WAIT_DEADLINE_MESSAGE, id);
}

/**
 * Holds until a result exists or the hold runs out. Anything but a result keeps the hold going: a
 * missing marker is not final, because the marker expires at the floored deadline while the AP may
 * still finish the message within that second. Lookup errors never end a hold early (only the
 * first is logged).
 */
export async function holdForResult(input: HoldInput): Promise<StepResponse> {
  const started = Date.now();
  const capped = input.capMs > 0 && input.capMs < input.timeoutMs;
  const holdEnd = started + (capped ? input.capMs : input.timeoutMs);
  const waker = new Waker();
  const onAbort = () => waker.wake();
  input.signal.addEventListener('abort', onAbort, { once: true });

  let sub: Subscription | undefined;
  try {
    // Subscribe before the first lookup so a result landing in between still wakes us.
    sub = await input.wakeup.subscribe(keyspaceChannel(input.db, input.keys.mailbox), waker.wake);
    let loggedError = false;
    for (;;) {
      if (input.signal.aborted) return await cancelAfterDisconnect(input);
      let state: RequestState | undefined;
      try {
        state = await input.store.lookup(input.keys);
      } catch (err) {
        if (!loggedError) {
          loggedError = true;
          input.log.warn({ err: (err as Error).message }, 'async-broker: result lookup failed during wait, retrying until the deadline');
        }
      }
      if (input.signal.aborted) return await cancelAfterDisconnect(input);
      if (state?.kind === 'result') return await deliver(input, state.raw);

      const left = holdEnd - Date.now();
      if (left <= 0) break;
      await waker.sleep(Math.min(left, input.wakeup.pollIntervalMs(sub)));
    }

    if (capped) return pendingResponse(input.id, input.id);
    // The deadline: one last look, then 504. A still-live copy (a re-attached retry whose original
    // deadline is later) stays fetchable, so it is answered as pending rather than as expired.
    try {
      const last = await input.store.lookup(input.keys);
      if (last.kind === 'result') return await deliver(input, last.raw);
      if (last.kind === 'pending') return pendingResponse(input.id, input.id);
    } catch (err) {
      input.log.warn({ err: (err as Error).message }, 'async-broker: final result lookup failed');
    }
    return timeoutResponse(input.id);
  } finally {
    input.signal.removeEventListener('abort', onAbort);
    sub?.close();
  }
}
