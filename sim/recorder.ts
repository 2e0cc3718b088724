/** The bounded log of received requests, with waiters for tests. */

import { WaitTimeoutError } from './errors';
import type { RecordedRequest } from './types';

export const DEFAULT_WAIT_MS = 5000;
const MAX_WAIT_MS = 10 * 60 * 1000;

type Waiter = () => void;

function boundedTimeout(ms: number | undefined): number {
  if (ms === undefined) return DEFAULT_WAIT_MS;
  if (!Number.isFinite(ms) || ms < 0) return 0;
  return Math.min(ms, MAX_WAIT_MS);
}

export class Recorder {
  /** Live array handed out as `Simulator.requests`; mutated in place so references stay current. */
  readonly requests: RecordedRequest[] = [];
  private bytes = 0;
  private readonly waiters = new Set<Waiter>();

  constructor(
    private readonly maxRequests: number,
    private readonly maxBytes: number,
  ) {}

  add(request: RecordedRequest): void {
    this.requests.push(request);
    this.bytes += request.body.length;
    while (this.requests.length > 1 && (this.requests.length > this.maxRequests || this.bytes > this.maxBytes)) {
      const dropped = this.requests.shift() as RecordedRequest;
      this.bytes -= dropped.body.length;
    }
    this.notify();
  }

  markClosedEarly(request: RecordedRequest): void {
    request.closedEarly = true;
    this.notify();
  }

  clear(): void {
    this.requests.length = 0;
    this.bytes = 0;
  }

  waitForRequests(n: number, timeoutMs?: number): Promise<RecordedRequest[]> {
    return this.waitFor(
      () => (this.requests.length >= n ? [...this.requests] : undefined),
      timeoutMs,
      () => `expected ${n} request(s), got ${this.requests.length}`,
    );
  }

  waitForClose(predicate: (req: RecordedRequest) => boolean, timeoutMs?: number): Promise<RecordedRequest> {
    return this.waitFor(
      () => this.requests.find((r) => r.closedEarly && predicate(r)),
      timeoutMs,
      () => 'no matching request was closed early by its client',
    );
  }

  private waitFor<T>(check: () => T | undefined, timeoutMs: number | undefined, why: () => string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const first = check();
      if (first !== undefined) {
        resolve(first);
        return;
      }
      const waiter: Waiter = () => {
        let value: T | undefined;
        try {
          value = check();
        } catch (err) {
          finish();
          reject(err);
          return;
        }
        if (value === undefined) return;
        finish();
        resolve(value);
      };
      const timer = setTimeout(() => {
        finish();
        reject(new WaitTimeoutError(`timed out after ${boundedTimeout(timeoutMs)} ms: ${why()}`));
      }, boundedTimeout(timeoutMs));
      const finish = (): void => {
        clearTimeout(timer);
        this.waiters.delete(waiter);
      };
      this.waiters.add(waiter);
    });
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}
