/**
 * Size, count and time bounds (issue #8). docs/hardening.md lists every bound with the test that
 * proves it; the ones proven here are those no other suite covers.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startSimulator } from '../../sim/simulator';
import { parseConfig } from '../../src/config/config';
import { PooledSideCallClient } from '../../src/gateway/client';
import { silentLogger } from '../../src/observability/logger';
import { UPSTREAM_ERROR_BODY_CAP } from '../../src/pipeline/errors';
import { MAX_JSON_DEPTH } from '../../src/pipeline/json-depth';
import { MAX_DECODED_HEADERS } from '../../src/extproc/headers';
import { startService } from '../../src/service';
import { createPrefillDecodeStep } from '../../src/steps/prefill-decode';
import { EnvoyClient } from '../protocol/envoy-client';
import { at, TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';
import { makeCtx, TestDeps } from '../unit/steps/fake-upstream';
import { expectOpenAiError } from '../faults/support/expect';

const MB = 1024 * 1024;

/** A JSON object of exactly `bytes` bytes (padding inside a string field). */
function bodyOfSize(bytes: number): string {
  const head = '{"model":"sim-model","prompt":[1,2,3],"max_tokens":1,"pad":"';
  const tail = '"}';
  return head + 'p'.repeat(bytes - head.length - tail.length) + tail;
}

/** A completions body whose `pad` field nests `depth - 1` arrays (the object itself is level 1). */
function nested(depth: number): string {
  return `{"model":"sim-model","prompt":[1,2,3],"max_tokens":1,"pad":${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}}`;
}

const PLAIN = { model: 'sim-model', prompt: [1, 2, 3], max_tokens: 1 };

describe.each(['full_duplex', 'buffered'] as const)('request bounds through Envoy (%s)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;
  beforeAll(async () => {
    stack = await startStack({ bodyMode, maxRequestBodyMb: 1 });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });
  beforeEach(() => stack.reset());

  it('server.max_request_body_size: exactly the limit passes, one byte more is our 413', async () => {
    expect((await client.post('/v1/completions', bodyOfSize(MB))).status).toBe(200);
    const res = await client.post('/v1/completions', bodyOfSize(MB + 1));
    expectOpenAiError(res, 413);
    expect(stack.sims.prefill.requests).toHaveLength(1);
  });

  it(`JSON nesting: ${MAX_JSON_DEPTH} levels pass, one more is a 400 (never a 502)`, async () => {
    expect((await client.post('/v1/completions', nested(MAX_JSON_DEPTH))).status).toBe(200);
    stack.reset();
    expectOpenAiError(await client.post('/v1/completions', nested(MAX_JSON_DEPTH + 1)), 400);
    expectOpenAiError(await client.post('/v1/completions', nested(50_000)), 400);
    for (const sim of Object.values(stack.sims)) expect(sim.requests).toHaveLength(0);
  });

  it('x-request-id: up to 128 [A-Za-z0-9-] is kept on every leg; longer is replaced', async () => {
    const ok = 'a'.repeat(128);
    expect((await client.post('/v1/completions', PLAIN, { headers: { 'x-request-id': ok } })).status).toBe(200);
    expect(stack.sims.prefill.requests[0]!.headers['x-request-id']).toBe(ok);
    stack.reset();
    expect((await client.post('/v1/completions', PLAIN, { headers: { 'x-request-id': `${ok}a` } })).status).toBe(200);
    expect(stack.sims.prefill.requests[0]!.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('Envoy: more than 100 headers, or headers over 60 KB, are refused (431) before the service', async () => {
    const many = Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`x-h${i}`, 'v']));
    expect((await client.post('/v1/completions', PLAIN, { headers: many })).status).toBe(431);
    expect((await client.post('/v1/completions', PLAIN, { headers: { 'x-big': 'b'.repeat(61 * 1024) } })).status).toBe(431);
    for (const sim of Object.values(stack.sims)) expect(sim.requests).toHaveLength(0);
  });

  // With Envoy's default limit of 100, 91 client headers passed and then the coordinator's own
  // headers on the final request pushed Envoy's mutation over it: a bare 500
  // (header_mutation_result_exceeds_limit). The public listener now allows 85, leaving room.
  it('91 client headers: a 4xx, not a 500', async () => {
    const many = Object.fromEntries(Array.from({ length: 91 }, (_, i) => [`x-h${i}`, 'v']));
    const res = await client.post('/v1/completions', PLAIN, { headers: many });
    expect(res.status).toBeLessThan(500);
  });

  // Envoy checks the coordinator's mutation of the request against the same 85, after adding its
  // own headers (x-forwarded-for, x-forwarded-proto, x-request-id, x-envoy-external-address) and
  // counting the four pseudo-headers: 76-81 client headers (through undici) used to pass the client
  // cap and then end in the bare 500 `header_mutation_result_exceeds_limit`. The coordinator now
  // counts the header map Envoy sends it against `server.max_request_headers` (85, the listener's
  // max_headers_count), leaves room for every header its forward may add, and answers our 431 at
  // once when there is none: no step runs, no worker sees the request.
  it('78 client headers: our 431, before any worker', async () => {
    const many = Object.fromEntries(Array.from({ length: 78 }, (_, i) => [`x-h${i}`, 'v']));
    const res = await client.post('/v1/completions', PLAIN, { headers: many });
    expectOpenAiError(res, 431);
    expect(res.json).toEqual({
      error: expect.objectContaining({ message: expect.stringMatching(/^request has too many headers \(\d+\); the limit is \d+ /) }),
    });
    for (const sim of Object.values(stack.sims)) expect(sim.requests).toHaveLength(0);
  });

  it('64 to 86 client headers: each is a 200 or a 431, never a 5xx', async () => {
    const statuses: Record<number, number> = {};
    for (let n = 64; n <= 86; n++) {
      const many = Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-h${i}`, 'v']));
      statuses[n] = (await client.post('/v1/completions', PLAIN, { headers: many })).status;
    }
    for (const status of Object.values(statuses)) expect([200, 431]).toContain(status);
    // The window is closed from below, not by refusing everything: the low end still passes.
    expect(statuses[64]).toBe(200);
    // And once refused, every larger count is refused too.
    const firstRefused = Object.keys(statuses)
      .map(Number)
      .find((n) => statuses[n] === 431)!;
    for (let n = firstRefused; n <= 86; n++) expect(statuses[n]).toBe(431);
  });

  it("a header over the workers' own limit (16 KB in Node and uvicorn) is the client's 431", async () => {
    const res = await client.post('/v1/completions', PLAIN, { headers: { 'x-big': 'b'.repeat(20 * 1024) } });
    expectOpenAiError(res, 431);
  });
});

describe('side-call bounds', () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    server = createServer((_req, res) => {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('e'.repeat(MB));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  it(`an upstream error body is read up to ${UPSTREAM_ERROR_BODY_CAP} bytes, for logs only`, async () => {
    const client = new PooledSideCallClient(url, { maxIdleConns: 1, idleTimeoutMs: 1000 });
    try {
      const res = await client.post('/x', {}, '{}', { step: 'prefill', signal: new AbortController().signal, okStatuses: [200] });
      expect(res.status).toBe(500);
      expect(res.body.length).toBe(UPSTREAM_ERROR_BODY_CAP);
    } finally {
      await client.close();
    }
  });

  it('prefill-decode: a hung pinned prefill is cancelled by its own deadline', async () => {
    let closedAt = 0;
    let startedAt = 0;
    const epp = createServer((req, res) => {
      if (req.headers['prefer'] === 'reserve-endpoint') {
        res.writeHead(204, { 'x-llm-d-reserved-host-port': '10.0.3.7:8000' }).end();
        return;
      }
      startedAt = Date.now();
      res.on('close', () => (closedAt = Date.now()));
    });
    await new Promise<void>((r) => epp.listen(0, '127.0.0.1', r));
    const td = new TestDeps(`http://127.0.0.1:${(epp.address() as AddressInfo).port}`, 100);
    try {
      const step = createPrefillDecodeStep({ kv_connector: 'kv-sglang' }, td.deps);
      const ctx = makeCtx({ body: { model: 'm', messages: [{ role: 'user', content: 'x' }] } });
      await step.execute(ctx);
      expect(ctx.decode).not.toBeNull();
      for (let i = 0; i < 100 && closedAt === 0; i++) await new Promise((r) => setTimeout(r, 20));
      expect(closedAt).toBeGreaterThan(0);
      expect(closedAt - startedAt).toBeLessThan(1000);
    } finally {
      await td.close();
      epp.closeAllConnections();
      await new Promise<void>((r) => epp.close(() => r()));
    }
  });
});

describe('ext_proc bounds', () => {
  it(`only the first ${MAX_DECODED_HEADERS} headers of a request are read; the service answers`, async () => {
    const sim = await startSimulator({ name: 'sim-any', role: 'any' });
    const service = await startService(
      // max_request_headers off: the 431 for too many headers would answer before any is read.
      parseConfig(
        {
          server: { listen_addr: '127.0.0.1:0', metrics_addr: '127.0.0.1:0', max_request_headers: 0 },
          gateway: { address: sim.url },
          pipeline: { steps: [{ type: 'prefill' }, { type: 'decode' }] },
        },
        {},
      ),
      { log: silentLogger() },
    );
    const client = new EnvoyClient(service.grpcPort);
    try {
      const s = client.open();
      const headers: Array<[string, string]> = [
        [':method', 'POST'],
        [':path', '/v1/completions'],
      ];
      for (let i = 0; i < 3000; i++) headers.push([`x-h${i}`, 'v']);
      s.sendHeaders(headers, { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
      s.sendBody(Buffer.from(JSON.stringify({ model: 'm', prompt: [1, 2], max_tokens: 1 })), true);
      expect((await s.next()).response).toBe('request_headers');
      s.end();
      await s.rest();
      const seen = Object.keys(sim.requests[0]!.headers).filter((h) => h.startsWith('x-h'));
      // 1024 entries read, two of them the pseudo-headers: nothing past x-h1021 exists for us.
      expect(seen.length).toBeGreaterThan(900);
      expect(seen.every((h) => Number(h.slice(3)) < MAX_DECODED_HEADERS - 2)).toBe(true);
      expect(at(sim.requests[0]!.json, 'max_tokens')).toBe(1);
    } finally {
      client.close();
      await service.close(500);
      await sim.close();
    }
  });
});
