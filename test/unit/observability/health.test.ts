/** Readiness polling rules of the health service (the gRPC side is covered in service.test.ts). */
import { EXT_PROC_SERVICE_NAME, HealthService } from '../../../src/observability/health';
import { silentLogger } from '../../../src/observability/logger';

describe('HealthService', () => {
  test('a check that rejects, answers false or never answers makes the service not ready', async () => {
    for (const check of [() => Promise.reject(new Error('down')), async () => false, () => new Promise<boolean>(() => undefined)]) {
      const h = new HealthService({ checks: [async () => true, check], checkTimeoutMs: 30, log: silentLogger() });
      await h.start();
      expect(h.status('')).toBe('SERVING');
      expect(h.status(EXT_PROC_SERVICE_NAME)).toBe('NOT_SERVING');
      h.stopPolling();
    }
  });

  test('nothing to check: ready at start, no timer wakes the process to re-check, and drain still ends it', async () => {
    jest.useFakeTimers();
    try {
      const idle = new HealthService({ checks: [], dependencies: [], intervalMs: 10, log: silentLogger() });
      await idle.start();
      expect(idle.status(EXT_PROC_SERVICE_NAME)).toBe('SERVING');
      expect(jest.getTimerCount()).toBe(0);
      idle.drain();
      expect(idle.status('')).toBe('NOT_SERVING');
      expect(idle.status(EXT_PROC_SERVICE_NAME)).toBe('NOT_SERVING');
      // A gating check or a dependency is polled.
      for (const opts of [{ checks: [async () => true] }, { checks: [], dependencies: [{ name: 'redis', check: async () => true }] }]) {
        const h = new HealthService({ ...opts, intervalMs: 10, log: silentLogger() });
        await h.start();
        expect(jest.getTimerCount()).toBe(1);
        h.stopPolling();
        expect(jest.getTimerCount()).toBe(0);
      }
    } finally {
      jest.useRealTimers();
    }
  });

  test('a check: ready at start; drain is final and stops polling', async () => {
    let calls = 0;
    const h = new HealthService({ checks: [async () => (calls++, true)], intervalMs: 10, log: silentLogger() });
    await h.start();
    expect(h.status(EXT_PROC_SERVICE_NAME)).toBe('SERVING');
    h.drain();
    const seen = calls;
    await new Promise((r) => setTimeout(r, 50));
    expect(calls).toBe(seen);
    expect(h.status('')).toBe('NOT_SERVING');
    expect(h.status(EXT_PROC_SERVICE_NAME)).toBe('NOT_SERVING');
  });
});
