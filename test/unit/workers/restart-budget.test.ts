import { DEFAULT_RESTART_BUDGET, RestartBudget } from '../../../src/workers/restart-budget';

describe('RestartBudget', () => {
  test('allows `limit` restarts inside the window, refuses the next, and allows again once the oldest has aged out', () => {
    let now = 0;
    const budget = new RestartBudget({ limit: 3, windowMs: 60_000, now: () => now });
    const taken = [0, 10_000, 20_000].map((t) => ((now = t), budget.take()));
    expect(taken).toEqual([true, true, true]);
    now = 59_999;
    expect(budget.take()).toBe(false);
    now = 60_000;
    expect(budget.take()).toBe(true);
    expect(budget.take()).toBe(false);
  });

  test('the default is 5 a minute', () => {
    let now = 0;
    const budget = new RestartBudget({ ...DEFAULT_RESTART_BUDGET, now: () => now });
    const taken = Array.from({ length: 6 }, () => budget.take());
    expect(taken).toEqual([true, true, true, true, true, false]);
    now = 60_000;
    expect(budget.take()).toBe(true);
  });
});
