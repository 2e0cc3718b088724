/**
 * The health services as gauges, read at scrape time: `epd_coordinator_ready` (1 while the
 * readiness service is SERVING) and `epd_coordinator_dependency_up{dependency}` (each non-gating
 * dependency, such as the async broker's Redis). Alerting on them needs no gRPC prober: a pod that
 * stays unready (a failing check) or whose Redis is down shows up in Prometheus. A draining pod
 * reports 0 too, until its metrics listener closes.
 */
import { Gauge, type Registry } from 'prom-client';
import { EXT_PROC_SERVICE_NAME, dependencyServiceName } from './health';

export interface HealthStatuses {
  status(service: string): string | undefined;
}

export function registerHealthGauges(registry: Registry, health: HealthStatuses, dependencies: readonly string[]): void {
  const up = (service: string): number => (health.status(service) === 'SERVING' ? 1 : 0);
  new Gauge({
    name: 'epd_coordinator_ready',
    help: 'Readiness (grpc.health.v1 service envoy.service.ext_proc.v3.ExternalProcessor): 1 SERVING, 0 NOT_SERVING (a readiness check failed, or draining).',
    registers: [registry],
    // server.workers > 1: 1 only while every worker is ready.
    aggregator: 'min',
    collect() {
      this.set(up(EXT_PROC_SERVICE_NAME));
    },
  });
  if (dependencies.length === 0) return;
  new Gauge({
    name: 'epd_coordinator_dependency_up',
    help: 'Non-gating dependencies (health service epd.coordinator.dependency.<name>): 1 SERVING, 0 NOT_SERVING.',
    labelNames: ['dependency'],
    registers: [registry],
    aggregator: 'min',
    collect() {
      for (const d of dependencies) this.labels(d).set(up(dependencyServiceName(d)));
    },
  });
}
