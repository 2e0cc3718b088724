/**
 * Queue load across a Redis failover: the async-broker step enqueues (the 202 is what a client
 * holds), our test processor consumes and dispatches to a loopback model that counts what it ran,
 * and a caller-supplied fault kills a master midway. Afterwards every accepted job is fetched, and
 * the figures the at-most-once contract is judged by are counted.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TestAsyncProcessor } from '../../../launch/async-processor';
import { sleep, waitUntil } from '../../../launch/ports';
import { createRedisClient } from '../../../src/steps/async-broker/redis-client';
import { parseRedisTarget } from '../../../src/steps/async-broker/redis-topology';
import { REPLICATED_HEADER } from '../../../src/steps/async-broker/step';
import { build, closeAll, request, respond, route, text } from '../../unit/steps/async-broker/harness';

export interface FailoverFigures {
  /** Enqueues answered 202. */
  readonly accepted: number;
  /** ... of which the replicas confirmed (`x-ap-replicated: true`). */
  readonly acceptedReplicated: number;
  /** Enqueues refused with 503 while no master was reachable (the client knows to retry). */
  readonly refused: number;
  /** Accepted jobs whose result the client fetched. */
  readonly completed: number;
  /** Accepted jobs that never produced a result (counted once the queue is empty and the processor idle). */
  readonly lost: number;
  /** Jobs still queued when counting (0 unless the processor could not keep up in time). */
  readonly leftQueued: number;
  /** ... of which the replicas had confirmed. */
  readonly lostReplicated: number;
  /** Jobs the model ran more than once. */
  readonly runTwice: number;
  /** Pops the processor dropped because the failover left their ownership unknown. */
  readonly unclaimed: number;
  /** Jobs the processor took and then gave up because the retry queue could not be written. */
  readonly dropped: number;
  /** Accepted after the new master took over, and how many of those completed. */
  readonly acceptedAfterFailover: number;
  readonly completedAfterFailover: number;
  /** From the kill to the promotion, and on to the dead node serving as a replica again. */
  readonly promotionMs: number;
  readonly healMs: number;
}

export interface FailoverRun {
  readonly redisUrl: string;
  /** Kills the master; resolves once the topology has promoted a replica. */
  readonly fail: () => Promise<void>;
  /** After the promotion: bring the dead node back as a replica. */
  readonly heal: () => Promise<void>;
  readonly label: string;
  /** Load before the kill, and after the heal. */
  readonly phaseMs?: number;
}

const QUEUE = 'request-sortedset';
const SUBMITTERS = 4;
/** The processor pops at most this many messages at once: the most a kill can catch mid-pop. */
export const POP_BATCH = 4;

async function modelServer(): Promise<{ server: Server; url: string; runs: Map<string, number> }> {
  const runs = new Map<string, number>();
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(parts).toString()) as { messages: { content: string }[] };
      const id = body.messages[0]!.content;
      runs.set(id, (runs.get(id) ?? 0) + 1);
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ answer: id }));
      }, 20);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, runs };
}

export async function runFailover(run: FailoverRun): Promise<FailoverFigures> {
  const model = await modelServer();
  const { step, routes } = build({ redis_url: run.redisUrl, wakeup_mode: 'poll', fetch_grace_seconds: 0 });
  await step.start();
  const ap = new TestAsyncProcessor({
    redisUrl: run.redisUrl,
    queues: [{ queueName: QUEUE, igwBaseUrl: model.url, resultTtlSeconds: 600 }],
    pollIntervalMs: 20,
    batchSize: POP_BATCH,
    concurrency: POP_BATCH,
    ackReplicas: 1,
    ackTimeoutMs: 500,
  });
  ap.start();

  const accepted = new Map<string, { replicated: boolean; afterFailover: boolean }>();
  let refused = 0;
  let phase: 'before' | 'failing' | 'after' = 'before';
  let stop = false;
  let seq = 0;
  const submitter = async (): Promise<void> => {
    while (!stop) {
      const id = `${run.label}-${++seq}`;
      const headers = { 'x-ap-mode': 'enqueue', 'x-team': 'acme', 'x-request-id': id, 'x-request-timeout-seconds': '120' };
      const r = await respond(step, request({ headers, body: { model: 'm', messages: [{ role: 'user', content: id }] } }).ctx);
      if (r.status === 202) accepted.set(id, { replicated: r.headers[REPLICATED_HEADER] === 'true', afterFailover: phase === 'after' });
      else if (r.status === 503) refused++;
      else throw new Error(`unexpected enqueue answer ${r.status}: ${text(r)}`);
      await sleep(r.status === 503 ? 50 : 10);
    }
  };
  const phaseMs = run.phaseMs ?? 3000;
  let promotionMs: number | undefined;
  let healMs: number | undefined;
  const load = Promise.all(Array.from({ length: SUBMITTERS }, submitter));
  try {
    await sleep(phaseMs);
    phase = 'failing';
    const killed = Date.now();
    await run.fail();
    promotionMs = Date.now() - killed;
    await run.heal();
    healMs = Date.now() - killed - promotionMs;
    phase = 'after';
    await sleep(phaseMs);
  } finally {
    stop = true;
    await load;
  }

  // Every accepted job has had its chance once the queues are empty and the processor is idle.
  const probe = createRedisClient(parseRedisTarget(run.redisUrl), { enableOfflineQueue: true, maxRetriesPerRequest: 1 });
  probe.on('error', () => undefined);
  const queued = async (): Promise<number> => (await probe.zcard(QUEUE)) + (await probe.zcard('retry-sortedset'));
  await waitUntil(async () => (await queued().catch(() => 1)) === 0, 'the processor to drain the queue', 45_000, 200).catch(
    () => undefined,
  );
  await ap.stop();
  // A reconnect of the probe's own connection is no finding: ask again.
  let leftQueued = -1;
  await waitUntil(
    async () => {
      leftQueued = await queued().catch(() => -1);
      return leftQueued >= 0;
    },
    'the queue length',
    10_000,
    200,
  );
  const completed = new Set<string>();
  let lookupFailures = 0;
  for (const id of accepted.keys()) {
    let got = await route(routes, 'GET', `/v1/requests/${id}`, { 'x-team': 'acme' });
    // 500 is "could not look it up" (a reconnect), not an answer about the job: ask again.
    for (let attempt = 0; got.status === 500 && attempt < 20; attempt++) {
      lookupFailures++;
      await sleep(200);
      got = await route(routes, 'GET', `/v1/requests/${id}`, { 'x-team': 'acme' });
    }
    if (got.status === 200 && text(got) === JSON.stringify({ answer: id })) completed.add(id);
  }
  if (lookupFailures > 0) process.stdout.write(`${run.label}: ${lookupFailures} lookups retried after a 500\n`);
  probe.disconnect();
  await ap.close();
  await closeAll();
  await new Promise<void>((r) => model.server.close(() => r()));

  const lost = [...accepted.keys()].filter((id) => !completed.has(id));
  const after = [...accepted.entries()].filter(([, a]) => a.afterFailover).map(([id]) => id);
  return {
    accepted: accepted.size,
    acceptedReplicated: [...accepted.values()].filter((a) => a.replicated).length,
    refused,
    completed: completed.size,
    lost: lost.length,
    leftQueued,
    lostReplicated: lost.filter((id) => accepted.get(id)!.replicated).length,
    runTwice: [...model.runs.values()].filter((n) => n > 1).length,
    unclaimed: ap.unclaimed.length,
    dropped: ap.dropped.length,
    acceptedAfterFailover: after.length,
    completedAfterFailover: after.filter((id) => completed.has(id)).length,
    promotionMs: promotionMs ?? -1,
    healMs: healMs ?? -1,
  };
}

/**
 * The at-most-once contract (docs/async-broker.md) with replica-confirmed enqueues: nothing runs
 * twice; a job the replicas confirmed is lost only when the kill caught its pop (a pop the
 * processor had to drop, or one whose reply died with the master: at most one batch); and the
 * broker carries on after the promotion.
 */
export function expectContract(f: FailoverFigures): void {
  expect(f.leftQueued).toBe(0);
  expect(f.runTwice).toBe(0);
  expect(f.completed + f.lost).toBe(f.accepted);
  expect(f.lostReplicated).toBeLessThanOrEqual(f.unclaimed + POP_BATCH);
  expect(f.acceptedAfterFailover).toBeGreaterThan(0);
  expect(f.completedAfterFailover).toBe(f.acceptedAfterFailover);
  expect(f.completed).toBeGreaterThan(0);
}
