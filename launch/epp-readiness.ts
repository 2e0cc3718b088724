/**
 * The readiness gate of the no-Kubernetes topology (launch/epp-topology.ts): Envoy admin `/ready`
 * answers 200 and the EPP's `llm_d_epp_ready_endpoints` gauge counts every endpoint.
 */
import { request } from 'node:http';

function get(url: string, timeoutMs: number): Promise<{ status: number; body: string }> {
  return new Promise((res, rej) => {
    const req = request(url, { method: 'GET', timeout: timeoutMs }, (r) => {
      let body = '';
      r.setEncoding('utf8');
      r.on('data', (c: string) => {
        if (body.length < 4 * 1024 * 1024) body += c;
      });
      r.on('end', () => res({ status: r.statusCode ?? 0, body }));
      r.on('error', rej);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', rej);
    req.end();
  });
}

/** The sum of `llm_d_epp_ready_endpoints` over its label sets, or undefined when absent. */
export function readyEndpointsGauge(metricsText: string): number | undefined {
  let total: number | undefined;
  for (const line of metricsText.split('\n')) {
    const m = /^llm_d_epp_ready_endpoints(?:\{[^}]*\})?\s+([0-9.eE+-]+)/.exec(line);
    if (m) total = (total ?? 0) + Number(m[1]);
  }
  return total;
}

export interface ReadinessState {
  readonly ready: boolean;
  readonly envoyReady: boolean;
  /** The EPP's gauge (undefined until it is published). */
  readonly readyEndpoints: number | undefined;
  readonly expectedEndpoints: number;
}

/**
 * The job's readiness gate: Envoy admin `/ready` is 200 and the EPP's `llm_d_epp_ready_endpoints`
 * (endpoints whose metrics it scraped recently) counts every endpoint in the file.
 */
export async function readinessGate(opts: {
  adminUrl: string;
  eppMetricsUrl: string;
  expectedEndpoints: number;
  timeoutMs?: number;
}): Promise<ReadinessState> {
  const t = opts.timeoutMs ?? 2000;
  const envoyReady = await get(`${opts.adminUrl}/ready`, t).then(
    (r) => r.status === 200,
    () => false,
  );
  const readyEndpoints = await get(opts.eppMetricsUrl, t).then(
    (r) => (r.status === 200 ? readyEndpointsGauge(r.body) : undefined),
    () => undefined,
  );
  return {
    ready: envoyReady && readyEndpoints === opts.expectedEndpoints,
    envoyReady,
    readyEndpoints,
    expectedEndpoints: opts.expectedEndpoints,
  };
}
