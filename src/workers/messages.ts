/** The IPC messages between the cluster primary and its workers (`process.send`, structured clone). */
import type { Registry } from 'prom-client';

export type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

/** Worker -> primary: the service is listening (its readiness checks ran once). */
export interface StartedMessage {
  readonly type: 'epd:started';
  readonly pid: number;
}
/** Primary -> worker: drain as on a first SIGTERM (`second`: a second signal, exit now). */
export interface DrainMessage {
  readonly type: 'epd:drain';
  readonly second: boolean;
}
/** Primary -> worker: send your registry. */
export interface MetricsRequest {
  readonly type: 'epd:metrics-request';
  readonly id: number;
}
/** Worker -> primary. */
export interface MetricsResponse {
  readonly type: 'epd:metrics-response';
  readonly id: number;
  readonly metrics?: MetricsJson;
  readonly error?: string;
}

export type WorkerMessage = StartedMessage | MetricsResponse;
export type PrimaryMessage = DrainMessage | MetricsRequest;

export function isMessage<T extends { type: string }>(m: unknown, type: T['type']): m is T {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === type;
}

/** The env var that tells a forked worker its slot (0..N-1), stable across restarts. */
export const WORKER_INDEX_ENV = 'EPD_WORKER_INDEX';
