/** Steady client traffic for the restart tests and the soak: N loops, each one request at a time. */
import { at, sseData, TestClient } from '../../../launch/client';

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

export interface MixedTally {
  readonly sent: number;
  /** Not a 200, or no complete answer at all. */
  readonly failed: number;
  /** Streams that answered 200 but lacked `[DONE]` or whose text was not the whole echo. */
  readonly cut: number;
  readonly failures: readonly string[];
}

/**
 * Chat completions, every other one streamed, each asking the echo workers to repeat a prompt of
 * its own: a stream counts as whole only when its deltas join to that prompt and `[DONE]` ends it.
 * Runs `concurrency` loops until `stop()` resolves true (checked before each request) or `total` is reached.
 */
export async function mixedChats(
  client: TestClient,
  opts: { concurrency: number; total?: number; stop?: () => boolean; timeoutMs?: number },
): Promise<MixedTally> {
  let sent = 0;
  let failed = 0;
  let cut = 0;
  const failures: string[] = [];
  const note = (what: string) => {
    if (failures.length < 20) failures.push(what);
  };
  await Promise.all(
    Array.from({ length: opts.concurrency }, async () => {
      while (!(opts.stop?.() ?? false) && (opts.total === undefined || sent < opts.total)) {
        const i = sent++;
        const stream = i % 2 === 1;
        const prompt = `request ${i} asks for every word of this sentence back`;
        const body = { model: 'sim-model', messages: [{ role: 'user', content: prompt }], stream };
        try {
          const res = await client.post('/v1/chat/completions', body, { timeoutMs: opts.timeoutMs ?? 30_000 });
          if (res.status !== 200) {
            failed++;
            note(`#${i} ${res.status} ${res.text.slice(0, 200)}`);
          } else if (stream) {
            const data = sseData(res.text);
            const text = data
              .filter((d) => d !== '[DONE]')
              .map((d) => String(at(JSON.parse(d), 'choices', 0, 'delta', 'content') ?? ''))
              .join('');
            if (data[data.length - 1] !== '[DONE]' || text !== prompt) {
              cut++;
              note(`#${i} stream cut: ${JSON.stringify(text)}`);
            }
          }
        } catch (err) {
          failed++;
          note(`#${i} ${(err as Error).message}`);
        }
      }
    }),
  );
  return { sent, failed, cut, failures };
}
