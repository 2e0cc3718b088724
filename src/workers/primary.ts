/**
 * The cluster primary of `server.workers` > 1: forks the workers (each runs the whole service on the
 * shared `server.listen_addr` port; Node's round-robin scheduler hands each new connection to the
 * next worker), serves the summed `/metrics`, restarts a worker that dies (within a budget), and on
 * SIGTERM drains every worker and exits when the last one has.
 *
 * The primary serves no gRPC itself: health is each worker's own, on the connection a probe lands on.
 */
import cluster, { type Worker } from 'node:cluster';
import type { Logger } from 'pino';
import type { AppConfig } from '../config/config';
import { startMetricsServer, type MetricsServer } from '../observability/metrics-server';
import { ClusterMetrics } from './cluster-metrics';
import { isMessage, WORKER_INDEX_ENV, type DrainMessage, type StartedMessage } from './messages';
import { DEFAULT_RESTART_BUDGET, RestartBudget, type RestartBudgetOptions } from './restart-budget';

/** After the workers' own hard-exit margin: the primary is the last to give up. */
const HARD_EXIT_MARGIN_MS = 12_000;
/** A dead worker's slot is refilled after this pause, so a crash loop does not spin the CPU. */
const RESTART_DELAY_MS = 200;

export interface PrimaryOptions {
  readonly restartBudget?: RestartBudgetOptions;
}

interface Slot {
  worker: Worker | undefined;
  started: boolean;
}

export async function runPrimary(config: AppConfig, log: Logger, opts: PrimaryOptions = {}): Promise<void> {
  const count = config.server.workers;
  const budget = new RestartBudget(opts.restartBudget ?? DEFAULT_RESTART_BUDGET);
  const metrics = config.server.metricsAddr ? new ClusterMetrics(log) : undefined;
  let metricsServer: MetricsServer | undefined;
  if (metrics && config.server.metricsAddr) {
    try {
      metricsServer = await startMetricsServer(config.server.metricsAddr, metrics, log);
    } catch (err) {
      log.fatal({ err: (err as Error).message }, 'start-up failed: metrics listener');
      process.stderr.write(`epd-coordinator: start-up failed: ${(err as Error).message}\n`);
      process.exit(1);
    }
  }

  // Explicit: NODE_CLUSTER_SCHED_POLICY=none would leave connections to the kernel's accept race.
  cluster.schedulingPolicy = cluster.SCHED_RR;
  const slots: Slot[] = Array.from({ length: count }, () => ({ worker: undefined, started: false }));
  let everyoneStarted = false;
  let draining = false;
  let exitCode = 0;
  const alive = () => slots.filter((s) => s.worker !== undefined).length;

  const finish = async () => {
    await metricsServer?.close().catch(() => undefined);
    log.info({ exit_code: exitCode }, 'stopped: every worker has exited');
    log.flush?.();
    process.exit(exitCode);
  };

  const shutdown = (reason: string) => {
    if (draining) return;
    draining = true;
    const { drainDelayMs, shutdownTimeoutMs } = config.server;
    log.info({ reason, workers: alive(), drain_delay_ms: drainDelayMs, grace_ms: shutdownTimeoutMs }, 'draining every worker');
    setTimeout(
      () => {
        log.error({ workers: alive() }, 'workers did not finish draining in time: killing them');
        for (const s of slots) s.worker?.process.kill('SIGKILL');
        process.exit(1);
      },
      drainDelayMs + shutdownTimeoutMs + HARD_EXIT_MARGIN_MS,
    ).unref();
    const drain: DrainMessage = { type: 'epd:drain', second: false };
    for (const s of slots) if (s.worker?.isConnected()) s.worker.send(drain);
    if (alive() === 0) void finish();
  };

  const fork = (index: number) => {
    const worker = cluster.fork({ [WORKER_INDEX_ENV]: String(index) });
    const slot = slots[index]!;
    slot.worker = worker;
    slot.started = false;
    metrics?.live.set(alive());
    worker.on('message', (message: unknown) => {
      if (!isMessage<StartedMessage>(message, 'epd:started')) return;
      slot.started = true;
      log.info({ worker: index, worker_pid: message.pid }, 'worker listening');
      // A worker forked while draining (a restart racing the signal) drains at once too.
      if (draining) worker.send({ type: 'epd:drain', second: false } satisfies DrainMessage);
      if (!everyoneStarted && slots.every((s) => s.started)) {
        everyoneStarted = true;
        log.info({ workers: count, port_shared: config.server.listenAddr }, 'all workers listening');
      }
    });
    worker.on('exit', (code, signal) => {
      if (slot.worker === worker) slot.worker = undefined;
      metrics?.live.set(alive());
      if (draining) {
        if (code !== 0) exitCode = 1;
        if (alive() === 0) void finish();
        return;
      }
      const facts = { worker: index, worker_pid: worker.process.pid, code, signal };
      if (!everyoneStarted) {
        // As a single process would: a service that cannot start exits 1.
        log.fatal(facts, 'a worker exited during start-up: stopping');
        exitCode = 1;
        shutdown('start-up failed');
        return;
      }
      if (!budget.take()) {
        const { limit, windowMs } = opts.restartBudget ?? DEFAULT_RESTART_BUDGET;
        log.fatal({ ...facts, limit, window_ms: windowMs }, 'workers keep dying: restart budget spent, stopping');
        exitCode = 1;
        shutdown('restart budget spent');
        return;
      }
      log.error(facts, 'worker died unexpectedly: restarting it');
      metrics?.restarts.inc();
      setTimeout(() => {
        if (!draining) fork(index);
      }, RESTART_DELAY_MS);
    });
  };

  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    if (++signals > 1) {
      log.warn({ signal }, 'second signal: workers exit now');
      const now: DrainMessage = { type: 'epd:drain', second: true };
      for (const s of slots) if (s.worker?.isConnected()) s.worker.send(now);
      setTimeout(() => process.exit(1), 500).unref();
      return;
    }
    shutdown(signal);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  log.info({ workers: count, metrics_port: metricsServer?.port ?? null }, 'cluster primary: forking workers');
  for (let i = 0; i < count; i++) fork(i);
}
