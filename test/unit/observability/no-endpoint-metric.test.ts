/**
 * `epd_coordinator_side_call_no_endpoint_total{phase,reason}`: side calls the EPP answered "no
 * endpoint", recorded by the side-call client for plain and streamed calls, and not confused with
 * flow control's saturation 429 or a worker's own 429/503. The answers are the real EPP's
 * (docs/operations.md; /work/shared/reference/real-peers.md "An empty pool").
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PooledSideCallClient } from '../../../src/gateway/client';
import { CoordinatorMetrics } from '../../../src/observability/metrics';

const ANSWERS: Record<string, { status: number; headers: Record<string, string>; body: string }> = {
  '/empty-profile': {
    status: 429,
    headers: { 'x-llm-d-request-dropped-reason': 'rejected-saturated' },
    body: 'inference error: ResourceExhausted - no endpoints available for the given request',
  },
  '/empty-pool': {
    status: 503,
    headers: { 'x-llm-d-request-dropped-reason': 'rejected-no-endpoints' },
    body: 'inference error: no endpoints available',
  },
  '/saturated': {
    status: 429,
    headers: { 'x-llm-d-request-dropped-reason': 'rejected-saturated' },
    body: 'inference error: ResourceExhausted - queue at capacity',
  },
  '/worker-503': { status: 503, headers: {}, body: 'no endpoints available' },
};

let server: Server;
let base: string;
beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const a = ANSWERS[req.url ?? ''] ?? { status: 200, headers: {}, body: '{}' };
      res.writeHead(a.status, { 'content-type': 'text/plain', ...a.headers }).end(a.body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

async function noEndpointSeries(m: CoordinatorMetrics): Promise<Record<string, number>> {
  const metric = m.registry.getSingleMetric('epd_coordinator_side_call_no_endpoint_total')!;
  const out: Record<string, number> = {};
  for (const v of (await metric.get()).values) out[`${v.labels['phase']}/${v.labels['reason']}`] = v.value;
  return out;
}

test('the EPP no-endpoint answers are counted by phase and reason; saturation and worker errors are not', async () => {
  const m = new CoordinatorMetrics({ processMetrics: false });
  const client = new PooledSideCallClient(base, { maxIdleConns: 2, idleTimeoutMs: 1000, observer: m.sideCalls });
  const signal = new AbortController().signal;
  for (const path of ['/empty-profile', '/empty-profile', '/saturated', '/worker-503', '/ok'])
    await client.post(path, {}, '{}', { step: 'prefill', signal });
  await client.post('/empty-pool', {}, '{}', { step: 'encode[1]', signal });
  await client.close();
  expect(await noEndpointSeries(m)).toEqual({ 'prefill/rejected-saturated': 2, 'encode/rejected-no-endpoints': 1 });
});

test('a streamed call answered "no endpoint" is counted, and the caller still reads the whole error body', async () => {
  const m = new CoordinatorMetrics({ processMetrics: false });
  const client = new PooledSideCallClient(base, { maxIdleConns: 2, idleTimeoutMs: 1000, observer: m.sideCalls });
  const signal = new AbortController().signal;
  const read = async (path: string) => {
    const res = await client.postStreaming(path, {}, '{}', { step: 'conditional-decode', signal });
    const parts: Buffer[] = [];
    for await (const chunk of res.body) parts.push(chunk);
    return { status: res.status, reason: res.headers['x-llm-d-request-dropped-reason'], body: Buffer.concat(parts).toString() };
  };
  expect(await read('/empty-profile')).toEqual({ status: 429, reason: 'rejected-saturated', body: ANSWERS['/empty-profile']!.body });
  expect(await read('/saturated')).toEqual({ status: 429, reason: 'rejected-saturated', body: ANSWERS['/saturated']!.body });
  expect((await read('/ok')).status).toBe(200);
  await client.close();
  expect(await noEndpointSeries(m)).toEqual({ 'conditional-decode/rejected-saturated': 1 });
});
