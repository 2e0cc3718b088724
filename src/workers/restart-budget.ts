/**
 * How many unexpected worker deaths the primary repairs before it gives up: a worker that keeps
 * dying (a bad dependency at start-up, a crash on every request) must surface as a failing pod,
 * not as a primary that forks forever.
 */
export interface RestartBudgetOptions {
  /** Restarts allowed inside one window. */
  readonly limit: number;
  readonly windowMs: number;
  readonly now?: () => number;
}

export class RestartBudget {
  private readonly times: number[] = [];
  private readonly now: () => number;

  constructor(private readonly opts: RestartBudgetOptions) {
    this.now = opts.now ?? Date.now;
  }

  /** Records one restart; false when it would exceed the budget (then nothing is recorded). */
  take(): boolean {
    const t = this.now();
    while (this.times.length > 0 && this.times[0]! <= t - this.opts.windowMs) this.times.shift();
    if (this.times.length >= this.opts.limit) return false;
    this.times.push(t);
    return true;
  }
}

/** Five restarts a minute: a crash now and then is repaired, a crash loop stops the pod. */
export const DEFAULT_RESTART_BUDGET: RestartBudgetOptions = { limit: 5, windowMs: 60_000 };
