/**
 * HTTP-level fuzzing through the real Envoy (issue #8): hostile JSON bodies (wrong types in every
 * field the steps read, huge and deep values, invalid UTF-8, byte damage) with odd headers, and raw
 * HTTP/1.1 requests Envoy's parser has to judge (bare CR, NUL, obs-fold, oversized and too many
 * headers). The answer is never a crash (the stack still serves afterwards), never a 5xx for a
 * client error (a request invalid per the reference gets its 4xx), and memory stays bounded.
 *
 * Seeded and sized by test/fuzz/support/settings.ts.
 */
import { connect } from 'node:net';
import fc from 'fast-check';
import { checkJsonDepth } from '../../src/pipeline/json-depth';
import { TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';
import { bodyCase, PATH_OF, type BodyCase } from './support/arbitraries';
import { fuzzParameters, fuzzTimeout, shortReport } from './support/settings';

const MAX_BODY_MB = 1;
const MAX_BODY_BYTES = MAX_BODY_MB * 1024 * 1024;

/** What the reference says a body deserves before any step runs: 413, 400, or "up to the steps". */
function expectedFor(body: Buffer): 413 | 400 | 'steps' {
  if (body.length > MAX_BODY_BYTES) return 413;
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return 400;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 400;
  try {
    checkJsonDepth(value);
  } catch {
    return 400;
  }
  return 'steps';
}

const tokenName = fc.stringMatching(/^x-[a-z0-9-]{1,30}$/);
const printable = fc.stringMatching(/^[\x20-\x7e]{0,200}$/);
const headers: fc.Arbitrary<Record<string, string>> = fc
  .array(
    fc.oneof(
      fc.tuple(tokenName, printable),
      fc.tuple(
        fc.constantFrom(
          'epp-profile',
          'x-gateway-destination-endpoint',
          'prefer',
          'x-data-parallel-rank',
          'authorization',
          'accept-encoding',
          'x-request-id',
        ),
        printable,
      ),
      // Under the workers' own header limit (16 KB in Node and uvicorn). Above it a worker answers
      // 431, or (on a request Envoy passes through, with more headers around it) drops the
      // connection, which Envoy reports as a 503: see docs/hardening.md.
      fc.tuple(
        fc.constant('x-big'),
        fc.integer({ min: 1, max: 12_000 }).map((n) => 'b'.repeat(n)),
      ),
    ),
    { maxLength: 8 },
  )
  .map((pairs) => Object.fromEntries(pairs));

const httpCase = fc.record({
  body: bodyCase,
  path: fc.oneof(
    { weight: 12, arbitrary: fc.constant(null) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '/v1/models',
        '/v1/embeddings',
        '/v1/chat/completions?stream=1',
        '/inference/v1/generate/',
        '/V1/Completions',
      ),
    },
  ),
  headers,
  contentType: fc.constantFrom('application/json', 'application/json', 'text/plain', 'application/x-www-form-urlencoded', ''),
});

/** Raw request lines Envoy's HTTP/1 codec must judge; each is a complete request with a small valid body. */
const rawHeaderLine = fc.oneof(
  fc.constantFrom(
    'x-a: b\rc',
    'x-a: b\u0000c',
    'x-a: b\n continued',
    'x-a:\tb',
    'x-a : b',
    'x a: b',
    ': empty',
    'x-a: \u00ff\u00fe',
    'x-a: b\r\n\r',
  ),
  fc.integer({ min: 1, max: 120_000 }).map((n) => `x-long: ${'l'.repeat(n)}`),
  // Up to 60 (room for the headers the coordinator and the gateway add), or over Envoy's 100. In
  // between is a known gap (from about 75): see test/security/bounds.test.ts.
  fc
    .oneof(fc.integer({ min: 40, max: 60 }), fc.integer({ min: 101, max: 160 }))
    .map((n) => Array.from({ length: n }, (_, i) => `x-h${i}: v`).join('\r\n')),
  fc.constantFrom(
    'transfer-encoding: chunked',
    'content-length: 5',
    'content-length: -1',
    'content-length: 1, 2',
    'expect: 100-continue',
    'upgrade: h2c',
    'connection: upgrade',
  ),
);

/** Header lines in total: at most 64, or over Envoy's 100 (the gap between is a known issue). */
function outsideHeaderCountGap(lines: readonly string[]): boolean {
  const n = lines.reduce((sum, l) => sum + l.split('\r\n').length, 0) + 3;
  return n <= 64 || n > 100;
}

function rawExchange(port: number, text: string): Promise<string> {
  return new Promise((resolve) => {
    const sock = connect({ host: '127.0.0.1', port });
    const parts: Buffer[] = [];
    let size = 0;
    const done = (): void => {
      sock.destroy();
      resolve(Buffer.concat(parts).toString('latin1'));
    };
    sock.setTimeout(5000, done);
    sock.on('data', (d: Buffer) => {
      size += d.length;
      if (size < 1 << 20) parts.push(d);
      // One status line is all we judge.
      if (Buffer.concat(parts).includes('\r\n\r\n')) done();
    });
    sock.on('error', done);
    sock.on('close', done);
    sock.write(text, 'latin1');
  });
}

describe('HTTP fuzzing through Envoy', () => {
  let stack: Stack;
  let client: TestClient;
  let seq = 0;

  beforeAll(async () => {
    stack = await startStack({
      maxRequestBodyMb: MAX_BODY_MB,
      logLevel: 1,
      simulator: { maxRecordedRequests: 20, maxRecordedBytes: 4 * 1024 * 1024 },
      steps: ({ render }) => [
        // Only 127.0.0.1 passes the allowlist, and the guard then blocks it: no download ever dials.
        { type: 'replace-media-urls', params: { allowed_domains: ['127.0.0.1'], max_multimodal_entries: 8, download_timeout: '1s' } },
        { type: 'render', params: { address: render, timeout: '5s' } },
        { type: 'encode' },
        { type: 'prefill' },
        { type: 'decode' },
      ],
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });

  it(
    'hostile bodies and headers: never a crash, never a 5xx for a client error, bounded memory',
    async () => {
      const rssBefore = process.memoryUsage().rss;
      try {
        await fc.assert(
          fc.asyncProperty(httpCase, async ({ body, path, headers: extra, contentType }) => {
            stack.reset();
            const id = `fuzz-${process.pid}-${++seq}`;
            const target = path ?? PATH_OF[(body as BodyCase).kind];
            const res = await client.post(target, body.body, {
              headers: { ...extra, 'content-type': contentType, 'x-request-id': id },
              timeoutMs: 20_000,
            });
            const workerFailed = Object.values(stack.sims).some((s) => s.requests.some((r) => (r.status ?? 0) >= 500));
            const inference = path === null || path === '/v1/chat/completions?stream=1';
            const expected = inference ? expectedFor(body.body) : 'steps';
            const context = `status ${res.status}, expected ${expected}, body ${res.text.slice(0, 300)}`;
            if (expected !== 'steps') expect({ context, status: res.status }).toEqual({ context, status: expected });
            else if (!workerFailed) expect({ context, serverError: res.status >= 500 }).toEqual({ context, serverError: false });
            // Our own error answers are OpenAI-shaped JSON. (Envoy's own local replies, such as 431
            // for headers over its limit, are plain text: see docs/hardening.md.)
            const envoyLocal = res.status === 431 && res.headers['x-inference-pod'] === undefined;
            if (res.status >= 400 && res.headers['x-inference-pod'] === undefined && !envoyLocal) {
              expect({ context, shape: typeof (res.json as { error?: unknown } | undefined)?.error }).toEqual({ context, shape: 'object' });
            }
          }),
          fuzzParameters('http'),
        );
      } catch (err) {
        throw shortReport('http', err);
      }
      expect((await client.post('/v1/completions', { model: 'sim-model', prompt: [1, 2, 3], max_tokens: 2 })).status).toBe(200);
      for (let i = 0; i < 200 && stack.service.activeStreams() > 0; i++) await new Promise((r) => setTimeout(r, 10));
      expect(stack.service.activeStreams()).toBe(0);
      const grownMb = (process.memoryUsage().rss - rssBefore) / (1024 * 1024);
      expect(grownMb).toBeLessThan(512);
    },
    fuzzTimeout('http', 60),
  );

  it(
    'raw HTTP/1.1 with odd header lines: Envoy answers 4xx or the request goes through; never a 5xx',
    async () => {
      const port = stack.envoy.publicPort;
      try {
        await fc.assert(
          fc.asyncProperty(fc.array(rawHeaderLine, { minLength: 1, maxLength: 3 }).filter(outsideHeaderCountGap), async (lines) => {
            const body = JSON.stringify({ model: 'sim-model', prompt: [1, 2], max_tokens: 1 });
            const head = [`POST /v1/completions HTTP/1.1`, 'host: fuzz.local', 'content-type: application/json', ...lines];
            if (!lines.some((l) => /^(content-length|transfer-encoding):/i.test(l))) head.push(`content-length: ${body.length}`);
            const answer = await rawExchange(port, `${head.join('\r\n')}\r\n\r\n${body}`);
            const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
            // 0: Envoy closed the connection without an answer, which is how it refuses some framing.
            // 501: what HTTP prescribes for a transfer coding the server does not implement (Envoy's
            // answer to `transfer-encoding: chunked` twice).
            const unimplementedCoding = status === 501 && lines.filter((l) => /^transfer-encoding:/i.test(l)).length > 1;
            const shown = lines.map((l) => l.slice(0, 80));
            expect({ shown, status, ok: status < 500 || unimplementedCoding }).toEqual({ shown, status, ok: true });
          }),
          fuzzParameters('raw'),
        );
      } catch (err) {
        throw shortReport('raw', err);
      }
      expect((await client.post('/v1/completions', { model: 'sim-model', prompt: [1, 2, 3], max_tokens: 2 })).status).toBe(200);
    },
    fuzzTimeout('raw', 60),
  );
});
