/**
 * The dashboard and the alert rules against a real Prometheus (issue 21 item 5): Prometheus
 * scrapes the running stack (the coordinator's metrics port, every second) and evaluates the shipped
 * rules file, while the test drives traffic that exercises every panel: cascades, cache hits,
 * selective disaggregation, the EPP's "no prefill endpoint" answer (the prefill simulator sends the
 * real EPP's status, header and body), worker 5xx, bad requests, streams, and async-broker jobs
 * through a real Redis and the test queue processor.
 *
 * Every PromQL expression of config/observability (the dashboard's panels with Grafana's `$job` and
 * `$__rate_interval` filled in as Grafana does; each data operand of every alert) must name metrics
 * the service exports and return a non-empty series of finite values from that traffic.
 *
 * Needs .tools/prometheus (scripts/install-prometheus.sh); skips, saying why, without it.
 */
import { join } from 'node:path';
import { request } from 'undici';
import { TestAsyncProcessor } from '../../launch/async-processor';
import { sleep, waitUntil } from '../../launch/ports';
import { ALERT_RULES_FILE, prometheusMissing, startPrometheus, type PrometheusHandle, type Series } from '../../launch/prometheus';
import {
  alertExpressions,
  dashboardExpressions,
  isNumberLiteral,
  metricNamesOf,
  topLevelOperands,
  withGrafanaVariables,
} from '../../launch/promql';
import { RedisServer } from '../support/redis';
import { startStack, type Stack } from '../support/stack';

const MODEL = 'sim-model';
const QUEUE = 'request-sortedset';
const JOB = 'epd-coordinator';
/** Grafana's `$__rate_interval` for this run: the whole traffic phase fits in it. */
const RATE_WINDOW = '1m';
const NO_ENDPOINT_ANSWERS = 3;
const WORKER_5XX = 3;
const ROUNDS = 2;
const QUEUED = 3;
let seq = 0;
const nextId = (): string => `prom-${process.pid}-${Date.now()}-${++seq}`;
const longPrompt = (tag: string) => Array.from({ length: 60 }, (_, i) => `${tag}${i}`).join(' ');

const missing = prometheusMissing();
const title = 'Prometheus scrapes the stack: every dashboard and alert expression returns data';

(missing ? describe.skip : describe)(missing ? `${title} (skipped: ${missing})` : title, () => {
  jest.setTimeout(90_000);
  let redis: RedisServer;
  let stack: Stack;
  let ap: TestAsyncProcessor;
  let prom: PrometheusHandle;

  const post = async (body: unknown, headers: Record<string, string> = {}) => {
    const res = await request(`${stack.publicUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': nextId(), 'x-team': 'acme', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    await res.body.text();
    return res.statusCode;
  };
  const chat = (content: string, more: Record<string, unknown> = {}) => ({
    model: MODEL,
    messages: [{ role: 'user', content }],
    max_tokens: 8,
    ...more,
  });

  /** The service's own count of decisions, to know when Prometheus has scraped all of the traffic. */
  const decisionsServed = async (): Promise<number> => {
    const text = await (await fetch(`http://127.0.0.1:${stack.service.metricsPort}/metrics`)).text();
    return [...text.matchAll(/^epd_coordinator_decisions_total\{[^}]*\} (\S+)$/gm)].reduce((s, m) => s + Number(m[1]), 0);
  };
  const scalarOf = (series: Series[]) => series.reduce((s, x) => s + Number(x.values[0]![1]), 0);

  /** Traffic for every panel; `round` keeps the prompts of each round apart. */
  const driveRound = async (round: number): Promise<number[]> => {
    const statuses: number[] = [];
    const tag = (what: string) => `r${round}${what}`;
    for (let i = 0; i < 3; i++) statuses.push(await post(chat(tag(`short ${i}`)))); // aggregated_short_prompt
    const repeated = longPrompt(tag('again'));
    statuses.push(await post(chat(repeated))); // the cascade, disaggregated
    statuses.push(await post(chat(repeated))); // cache_hit: the decode worker has the prefix now
    statuses.push(...(await Promise.all([0, 1, 2, 3].map((i) => post(chat(longPrompt(tag(`par${i}`)), { stream: i % 2 === 0 }))))));
    stack.sims.prefill.setFaults([
      {
        match: { profile: 'prefill' },
        status: 429,
        headers: { 'x-llm-d-request-dropped-reason': 'rejected-saturated' },
        body: 'inference error: ResourceExhausted - no endpoints available for the given request',
      },
    ]);
    for (let i = 0; i < NO_ENDPOINT_ANSWERS; i++) statuses.push(await post(chat(longPrompt(tag(`fallback${i}`))))); // aggregated_fallback
    stack.sims.prefill.setFaults([{ match: { profile: 'prefill' }, status: 500, body: 'worker failed' }]);
    for (let i = 0; i < WORKER_5XX; i++) statuses.push(await post(chat(longPrompt(tag(`fail${i}`))))); // upstream_5xx
    stack.sims.prefill.setFaults([]);
    statuses.push(await post('{"model": "sim-model", "messages": [')); // bad_request
    for (let i = 0; i < QUEUED; i++) statuses.push(await post(chat(tag(`queued ${i}`)), { 'x-ap-mode': 'enqueue' })); // step_response
    // The jobs wait until Prometheus has seen them queued; then the processor drains the queue.
    await waitUntil(
      async () => scalarOf(await prom.query(`max(epd_coordinator_async_queue_depth{queue="${QUEUE}"})`)) >= QUEUED,
      'Prometheus to see the queued jobs',
      10_000,
      250,
    );
    await ap.runOnce();
    return statuses;
  };

  /** Until Prometheus' last scrape counts every decision the service has made. */
  const waitScraped = async (): Promise<void> => {
    const served = await decisionsServed();
    await waitUntil(
      async () =>
        scalarOf(await prom.query(`sum(epd_coordinator_decisions_total{job="${JOB}"})`)) >= served &&
        (await prom.query(`up{job="${JOB}"} == 1`)).length > 0,
      'Prometheus to scrape the traffic',
      15_000,
      250,
    );
  };

  beforeAll(async () => {
    redis = await RedisServer.start();
    stack = await startStack({
      kvConnector: 'kv-nixl',
      simulator: { honourPreferIfAvailable: true, timeToFirstTokenMs: 20 },
      steps: ({ render }) => [
        {
          type: 'async-broker',
          params: { redis_url: redis.url(), wakeup_mode: 'auto', routes: [{ model: MODEL, queue: QUEUE, tier: 'interactive' }] },
        },
        { type: 'render', params: { address: render, timeout: '30s' } },
        { type: 'conditional-decode' },
        { type: 'prefill', params: { min_prompt_tokens: 32, fallback_to_decode: true } },
        { type: 'decode' },
      ],
    });
    ap = new TestAsyncProcessor({
      redisUrl: redis.url(),
      queues: [{ queueName: QUEUE, igwBaseUrl: stack.asyncUrl, resultTtlSeconds: 600, inferenceObjective: 'queued-batch' }],
    });
    prom = await startPrometheus({
      dir: join(stack.dir, 'prometheus'),
      targets: [{ job: JOB, address: `127.0.0.1:${stack.service.metricsPort}` }],
      ruleFiles: [ALERT_RULES_FILE],
    });

    // Two rounds of traffic, each scraped: a rate needs a series to grow between two scrapes, and
    // a series that first appears in a scrape only counts from there.
    await waitScraped();
    for (let round = 0; round < ROUNDS; round++) {
      const statuses = await driveRound(round);
      expect(statuses.filter((s) => s === 200)).toHaveLength(3 + 2 + 4 + NO_ENDPOINT_ANSWERS);
      expect(statuses.filter((s) => s === 502)).toHaveLength(WORKER_5XX);
      expect(statuses.filter((s) => s === 202)).toHaveLength(QUEUED);
      await waitScraped();
    }
    await sleep(2000); // a few more rule evaluations after the traffic
  }, 90_000);

  afterAll(async () => {
    await prom?.stop();
    await ap?.close();
    await stack?.close();
    await redis?.destroy();
  });

  const finite = (series: Series[]) => series.flatMap((s) => s.values.map(([, v]) => v)).every((v) => Number.isFinite(Number(v)));

  test('every expression names metrics Prometheus scraped from the service', async () => {
    const scraped = new Set(await prom.metricNames());
    const named = [...dashboardExpressions(), ...alertExpressions()].flatMap((e) =>
      metricNamesOf(e.expr).map((name) => ({ where: e.where, name })),
    );
    expect(named.length).toBeGreaterThan(20);
    expect(named.filter((n) => !scraped.has(n.name))).toEqual([]);
  });

  test.each(dashboardExpressions().map((e) => [e.where, e.expr]))('dashboard %s returns finite data', async (_where, expr) => {
    const series = await prom.query(withGrafanaVariables(expr, RATE_WINDOW));
    expect(series.length).toBeGreaterThan(0);
    expect({ expr, finite: finite(series) }).toEqual({ expr, finite: true });
  });

  test.each(alertExpressions().map((e) => [e.where, e.expr]))('%s: each data operand returns finite data', async (_where, expr) => {
    const operands = topLevelOperands(expr).filter((o) => !isNumberLiteral(o));
    expect(operands.length).toBeGreaterThan(0);
    for (const operand of operands) {
      const series = await prom.query(operand);
      expect({ operand, series: series.length > 0, finite: finite(series) }).toEqual({ operand, series: true, finite: true });
    }
  });

  test('the panels see what the traffic did: each path, each disaggregation decision, the no-endpoint answers, the worker 5xx and the queued jobs', async () => {
    const labels = async (expr: string, label: string) => new Set((await prom.query(expr)).map((s) => s.metric[label]));
    expect([...(await labels('sum by (path) (epd_coordinator_decisions_total)', 'path'))]).toEqual(
      expect.arrayContaining(['cascade', 'cache_hit', 'step_response', 'error']),
    );
    expect([...(await labels('sum by (path) (epd_coordinator_disaggregation_total)', 'path'))].sort()).toEqual([
      'aggregated_fallback',
      'aggregated_short_prompt',
      'disaggregated',
    ]);
    expect(
      scalarOf(await prom.query('sum(epd_coordinator_side_call_no_endpoint_total{phase="prefill",reason="rejected-saturated"})')),
    ).toBe(ROUNDS * NO_ENDPOINT_ANSWERS);
    expect(scalarOf(await prom.query('sum(llm_d_coordinator_request_error_total{error_code="upstream_5xx"})'))).toBe(ROUNDS * WORKER_5XX);
    expect(scalarOf(await prom.query('sum(llm_d_coordinator_request_error_total{error_code="bad_request"})'))).toBe(ROUNDS);
    // Each failed request tried prefill twice (one retry of a 5xx: steps/prefill.ts).
    expect(scalarOf(await prom.query('sum(epd_coordinator_side_call_duration_seconds_count{phase="prefill",status="500"})'))).toBe(
      ROUNDS * 2 * WORKER_5XX,
    );
    expect(scalarOf(await prom.query('epd_coordinator_ready'))).toBe(1);
    // The broker's queue: seen holding the jobs, then drained by the processor.
    const depth = `epd_coordinator_async_queue_depth{queue="${QUEUE}"}`;
    expect(scalarOf(await prom.query(`max_over_time(${depth}[${RATE_WINDOW}])`))).toBeGreaterThanOrEqual(QUEUED);
    expect(scalarOf(await prom.query(depth))).toBe(0);
    expect(
      scalarOf(await prom.query(`max_over_time(epd_coordinator_async_queue_oldest_age_seconds{queue="${QUEUE}"}[${RATE_WINDOW}])`)),
    ).toBeGreaterThan(0);
  });

  test('the rules load and evaluate without errors, and the traffic puts the error-ratio and no-endpoint alerts in pending', async () => {
    const rules = await prom.rules();
    expect(rules.map((r) => ({ name: r.name, health: r.health, error: r.lastError ?? '' }))).toEqual(
      alertExpressions().map((e) => ({ name: e.where.replace(/^alert /, ''), health: 'ok', error: '' })),
    );
    let active: string[] = [];
    await waitUntil(
      async () => {
        active = (await prom.alerts()).filter((a) => a.state !== 'inactive').map((a) => a.labels['alertname']!);
        return active.includes('EpdCoordinatorErrorRatioHigh') && active.includes('EpdCoordinatorEppNoEndpoints');
      },
      'the alerts to be pending',
      10_000,
      250,
    ).catch(() => undefined);
    expect([...new Set(active)].sort()).toEqual(expect.arrayContaining(['EpdCoordinatorEppNoEndpoints', 'EpdCoordinatorErrorRatioHigh']));
    expect(active).not.toContain('EpdCoordinatorNotReady');
  });
});
