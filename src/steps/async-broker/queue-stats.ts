/**
 * The backlog of the queues the step feeds, for `epd_coordinator_async_queue_depth{queue}` and
 * `epd_coordinator_async_queue_oldest_age_seconds{queue}`, read at scrape time.
 *
 * Every service replica runs the step, and all of them see the same queues. So one replica at a
 * time reports them: the holder of a lease in Redis, taken or renewed on every scrape and left to
 * expire when its holder stops scraping (shut down, or no longer scraped). Any other replica
 * exports no queue series. A lease lost to a failover can briefly give two holders, reporting the
 * same values; dashboards aggregate with `max by (queue)`.
 *
 * The queue is llm-d-async's sorted set scored by deadline, so the oldest job is not simply the
 * first. The age is the oldest `data.created` among the first {@link HEAD_SAMPLE} members in
 * dispatch order: exact when one timeout applies to a queue, a lower bound when a shorter-timeout
 * job queued later is ahead of an older one. Redis copies each sampled member into the script, so
 * the sample stays small.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { QueueStat } from '../../pipeline/step';
import type { QueueRoute } from './config';
import type { BrokerStore } from './store';
import { LuaScript } from './store';

export const QUEUE_METRICS_LEASE_KEY = 'epd-coordinator:queue-metrics-lease';
/** Longer than any sensible scrape interval, so the holder keeps it from one scrape to the next. */
export const QUEUE_METRICS_LEASE_MS = 60_000;
export const HEAD_SAMPLE = 16;

/** KEYS lease; ARGV holder id, TTL ms. 1 = this holder reports. */
const LEASE = `local holder = redis.call("GET", KEYS[1])
if not holder then
  redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
return 0
`;

/**
 * KEYS queue; ARGV sample size. {depth, oldest created (Unix seconds), or -1}. Only the envelope's
 * head is matched: `"created":` with both quotes cannot occur inside a JSON string, and
 * `data.created` comes before the payload.
 */
const BACKLOG = `local depth = redis.call("ZCARD", KEYS[1])
local oldest = -1
if depth > 0 then
  for _, m in ipairs(redis.call("ZRANGE", KEYS[1], 0, tonumber(ARGV[1]) - 1)) do
    local c = tonumber(string.match(m, '"created":(%d+)'))
    if c and c > 0 and (oldest < 0 or c < oldest) then
      oldest = c
    end
  end
end
return {depth, oldest}
`;

const leaseScript = new LuaScript(LEASE);
const backlogScript = new LuaScript(BACKLOG);

/** The routed queues and the default one, de-duplicated: a bounded label set fixed by config. */
export function configuredQueues(routes: readonly QueueRoute[], defaultQueue: string): string[] {
  return [...new Set([defaultQueue, ...routes.map((r) => r.queue || defaultQueue)])];
}

export class QueueStats {
  private readonly holder = randomUUID();
  private loggedError = false;

  constructor(
    private readonly store: BrokerStore,
    private readonly queues: readonly string[],
    private readonly log: Logger,
  ) {}

  async collect(nowMs = Date.now()): Promise<QueueStat[]> {
    try {
      const c = await this.store.conn();
      if ((await leaseScript.run(c, [QUEUE_METRICS_LEASE_KEY], [this.holder, QUEUE_METRICS_LEASE_MS])) !== 1) return [];
      const out: QueueStat[] = [];
      for (const queue of this.queues) {
        const [depth, oldest] = (await backlogScript.run(c, [queue], [HEAD_SAMPLE])) as [number, number];
        out.push({ queue, depth, oldestAgeSeconds: oldest < 0 ? null : Math.max(0, nowMs / 1000 - oldest) });
      }
      this.loggedError = false;
      return out;
    } catch (err) {
      if (!this.loggedError) {
        this.loggedError = true;
        this.log.warn({ err: (err as Error).message }, 'async-broker: reading the queue backlog failed');
      }
      return [];
    }
  }
}
