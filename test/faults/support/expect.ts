/** Assertions the fault, security and fuzz suites share. */
import type { RunningService } from '../../../src/service';
import type { ClientResponse } from '../../../launch/client';
import { waitUntil } from '../../../launch/ports';

/** Marks every simulated upstream error body, so a test can prove none reaches the client. */
export const UPSTREAM_SECRET = 'UPSTREAM-SECRET-8c1f';

/** The client got `status` with the OpenAI error shape and our own message, no upstream text. */
export function expectOpenAiError(res: ClientResponse, status: number): void {
  expect({ status: res.status, text: res.text }).toEqual({ status, text: expect.any(String) });
  expect(res.headers['content-type']).toMatch(/application\/json/);
  expect(res.json).toEqual({
    error: { message: expect.stringMatching(/\(request_id: [A-Za-z0-9-]+\)$/), type: expect.any(String), param: null, code: status },
  });
  expect(res.text).not.toContain(UPSTREAM_SECRET);
}

/** Every `Process` stream of the service ended (the in-flight count is back at 0). */
export async function expectIdle(service: RunningService, timeoutMs = 3000): Promise<void> {
  await waitUntil(() => service.activeStreams() === 0, 'the service to have no stream in flight', timeoutMs, 10);
}

/** Collects unhandled promise rejections raised in this process (the service runs in-process). */
export function trackUnhandledRejections(): { readonly seen: unknown[]; dispose(): void } {
  const seen: unknown[] = [];
  const listener = (reason: unknown): void => {
    seen.push(reason);
  };
  process.on('unhandledRejection', listener);
  return { seen, dispose: () => process.off('unhandledRejection', listener) };
}
