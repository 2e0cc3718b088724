/**
 * `grpc.health.v1.Health` on the ext_proc gRPC server.
 *
 * - service `""` (liveness): SERVING from start to drain. It never reflects dependencies, so a
 *   Redis outage does not get the pod restarted.
 * - service `envoy.service.ext_proc.v3.ExternalProcessor` (readiness, and what an Envoy Gateway
 *   active health check names): SERVING while every readiness check passes, polled every few
 *   seconds (not at all when there is none).
 * - `epd.coordinator.dependency.<name>` per non-gating dependency (the async broker's Redis): its own
 *   status, without taking the service out. The async broker fails open for passthrough traffic, so
 *   a Redis outage must not empty the endpoint set; operators watch (and alert on) this service.
 * - all NOT_SERVING for good once draining starts.
 */
import type * as grpc from '@grpc/grpc-js';
import { HealthStatuses, type ServingStatus } from '../extproc/grpc-health';
import type { Logger } from 'pino';

export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';
export const LIVENESS_SERVICE_NAME = '';

/** Resolves true when a dependency is usable. A rejection or a slow answer counts as false. */
export type ReadinessCheck = () => Promise<boolean>;

/** Health service name of a non-gating dependency. */
export const dependencyServiceName = (name: string): string => `epd.coordinator.dependency.${name}`;

export interface DependencyCheck {
  readonly name: string;
  readonly check: ReadinessCheck;
}

export interface HealthOptions {
  /** Gating: readiness is SERVING only while all pass. */
  readonly checks: readonly ReadinessCheck[];
  /** Reported under their own service names; they never change readiness. */
  readonly dependencies?: readonly DependencyCheck[];
  /** Poll period of the readiness checks. Default 5 s. */
  readonly intervalMs?: number;
  /** Time one check may take before it counts as failed. Default 2 s. */
  readonly checkTimeoutMs?: number;
  readonly log: Logger;
}

async function runCheck(check: ReadinessCheck, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      check().then((ok) => ok === true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

export class HealthService {
  private readonly statuses = new HealthStatuses({ [LIVENESS_SERVICE_NAME]: 'NOT_SERVING', [EXT_PROC_SERVICE_NAME]: 'NOT_SERVING' });
  private timer: NodeJS.Timeout | undefined;
  private polling = false;
  /** The first poll logs its result even when it leaves the status unchanged (NOT_SERVING). */
  private firstPoll = true;
  private draining = false;
  private readonly intervalMs: number;
  private readonly checkTimeoutMs: number;

  constructor(private readonly opts: HealthOptions) {
    this.intervalMs = opts.intervalMs ?? 5000;
    this.checkTimeoutMs = opts.checkTimeoutMs ?? 2000;
    for (const d of opts.dependencies ?? []) this.set(dependencyServiceName(d.name), 'NOT_SERVING');
  }

  /** Registers the Health service; call before the server binds. */
  addTo(server: grpc.Server): void {
    this.statuses.addTo(server);
  }

  /** Runs the checks once (so readiness is right from the first probe), then polls them. */
  async start(): Promise<void> {
    this.set(LIVENESS_SERVICE_NAME, 'SERVING');
    await this.poll();
    // Nothing can change readiness but the drain: no timer, so an idle service is not woken every
    // few seconds to find that out (the default pipeline has no gating check and no dependency).
    if (this.draining || (this.opts.checks.length === 0 && !this.opts.dependencies?.length)) return;
    this.timer = setInterval(() => void this.poll(), this.intervalMs);
    this.timer.unref();
  }

  /** NOT_SERVING on every service from now on; checks stop. */
  drain(): void {
    this.draining = true;
    this.stopPolling();
    for (const name of this.statuses.services()) this.set(name, 'NOT_SERVING');
  }

  stopPolling(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  status(service: string): ServingStatus | undefined {
    return this.statuses.get(service);
  }

  private async poll(): Promise<void> {
    // A check slower than the interval must not pile up.
    if (this.polling || this.draining) return;
    this.polling = true;
    try {
      const deps = this.opts.dependencies ?? [];
      const [results, depResults] = await Promise.all([
        Promise.all(this.opts.checks.map((c) => runCheck(c, this.checkTimeoutMs))),
        Promise.all(deps.map((d) => runCheck(d.check, this.checkTimeoutMs))),
      ]);
      if (this.draining) return;
      deps.forEach((d, i) => {
        const name = dependencyServiceName(d.name);
        const status: ServingStatus = depResults[i] ? 'SERVING' : 'NOT_SERVING';
        if (status !== this.statuses.get(name) || this.firstPoll) {
          if (status === 'SERVING') this.opts.log.info({ service: name }, 'dependency up');
          else this.opts.log.warn({ service: name }, 'dependency down (requests that need it fail; the rest are served)');
        }
        this.set(name, status);
      });
      const failed = results.flatMap((ok, i) => (ok ? [] : [this.opts.checks[i]!.name || `check[${i}]`]));
      const next: ServingStatus = failed.length === 0 ? 'SERVING' : 'NOT_SERVING';
      if (next !== this.statuses.get(EXT_PROC_SERVICE_NAME) || this.firstPoll) {
        if (next === 'SERVING') this.opts.log.info({ service: EXT_PROC_SERVICE_NAME }, 'ready');
        else this.opts.log.warn({ service: EXT_PROC_SERVICE_NAME, failed }, 'not ready: a readiness check failed');
      }
      this.firstPoll = false;
      this.set(EXT_PROC_SERVICE_NAME, next);
    } finally {
      this.polling = false;
    }
  }

  private set(service: string, status: ServingStatus): void {
    if (this.statuses.get(service) === status) return;
    this.statuses.set(service, status);
  }
}
