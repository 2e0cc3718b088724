/**
 * A request's metrics, trace and `pipeline step timings` line are written one immediate after its
 * answer (pipeline-exchange.ts, afterAnswer), so that the answer leaves first. A test that drives an
 * exchange in-process awaits this before it reads them.
 */
export function answerLeft(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
