/** Steady client traffic for the restart tests and the soak: N loops, each one request at a time. */
import { TestClient } from '../../../launch/client';

export interface Outcome {
  /** performance.now() at send and at the end of the answer (or failure). */
  readonly start: number;
  readonly end: number;
  /** The status, or `error` when no complete answer came (refused, reset, timeout). */
  readonly status: number | 'error';
}

export interface Load {
  /** Stops sending, waits for the requests in flight, returns every outcome in completion order. */
  stop(): Promise<Outcome[]>;
  /** Outcomes so far. */
  readonly outcomes: readonly Outcome[];
}

export interface LoadOptions {
  readonly concurrency: number;
  /** The request body for the i-th request (any loop). */
  readonly body: (i: number) => { path: string; body: unknown };
  /** Pause between a loop's requests, ms. Default 0. */
  readonly pauseMs?: number;
  readonly timeoutMs?: number;
}

export function startLoad(baseUrl: string, opts: LoadOptions): Load {
  const client = new TestClient(baseUrl);
  const outcomes: Outcome[] = [];
  let running = true;
  let n = 0;
  const loop = async (): Promise<void> => {
    while (running) {
      const { path, body } = opts.body(n++);
      const start = performance.now();
      let status: number | 'error';
      try {
        status = (await client.post(path, body, { timeoutMs: opts.timeoutMs ?? 10_000 })).status;
      } catch {
        status = 'error';
      }
      outcomes.push({ start, end: performance.now(), status });
      if (opts.pauseMs) await new Promise((r) => setTimeout(r, opts.pauseMs));
    }
  };
  const loops = Array.from({ length: opts.concurrency }, loop);
  return {
    outcomes,
    stop: async () => {
      running = false;
      await Promise.all(loops);
      await client.close();
      return outcomes;
    },
  };
}

/**
 * Sends `total` tiny completions through `client`, `concurrency` at a time, as fast as they are
 * answered; returns how many got each status (the stock-Envoy connection tests).
 */
export async function countStatuses(client: TestClient, total: number, concurrency: number): Promise<Record<number, number>> {
  const statuses = new Map<number, number>();
  let next = 0;
  const body = { model: 'sim-model', prompt: 'hi', max_tokens: 1 };
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        next++;
        const res = await client.post('/v1/completions', body);
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      }
    }),
  );
  return Object.fromEntries(statuses);
}
