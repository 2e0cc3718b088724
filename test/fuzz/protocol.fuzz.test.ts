/**
 * Protocol-level fuzzing (issue #8): random and mutated ProcessingRequest sequences, headers and
 * bodies, sent the way Envoy's ext_proc filter sends them, to a real service whose side calls go to
 * a simulator on loopback. Every stream must end with well-formed answers (or a clean cancel), no
 * rejection may go unhandled, nothing may stay in flight, and memory must stay bounded.
 *
 * Seeded and sized by test/fuzz/support/settings.ts (CI: a fixed seed; `npm run fuzz`: 100k).
 */
import fc from 'fast-check';
import type { StatusObject } from '@grpc/grpc-js';
import { startSimulator, type Simulator } from '../../sim/simulator';
import { parseConfig } from '../../src/config/config';
import { silentLogger } from '../../src/observability/logger';
import { startService, type RunningService } from '../../src/service';
import { EnvoyClient, type BodyModeName, type EnvoyStream, type ProcessingResponseMsg } from '../protocol/envoy-client';
import { bodyCase, headerList, PATH_OF } from './support/arbitraries';
import { fuzzParameters, fuzzTimeout, shortReport } from './support/settings';

const RESPONSES = new Set([
  'request_headers',
  'response_headers',
  'request_body',
  'response_body',
  'request_trailers',
  'response_trailers',
  'immediate_response',
]);

type Op =
  | { t: 'headers'; headers: Array<[string, string]>; eos: boolean }
  | { t: 'body'; data: Buffer; eos: boolean }
  | { t: 'trailers' }
  | { t: 'resp'; which: 'headers' | 'body' | 'trailers' }
  | { t: 'empty' }
  | { t: 'cancel' };

interface Script {
  readonly mode: BodyModeName | undefined;
  readonly ops: Op[];
}

const modeArb = fc.constantFrom<BodyModeName | undefined>(
  'FULL_DUPLEX_STREAMED',
  'FULL_DUPLEX_STREAMED',
  'BUFFERED',
  'BUFFERED',
  'NONE',
  'STREAMED',
  'BUFFERED_PARTIAL',
  undefined,
);

/** Splits a body into 1-4 chunks; end_of_stream on the last unless `open`. */
function chunked(body: Buffer, cuts: number[], open: boolean): Op[] {
  const points = [...new Set(cuts.map((c) => (body.length === 0 ? 0 : c % body.length)))].sort((a, b) => a - b);
  const ops: Op[] = [];
  let from = 0;
  for (const p of [...points, body.length]) {
    if (p < from) continue;
    ops.push({ t: 'body', data: body.subarray(from, p), eos: false });
    from = p;
  }
  if (!open) (ops[ops.length - 1] as { eos: boolean }).eos = true;
  return ops;
}

/** A mostly well-formed request (the pipeline runs), with odd headers, chunking and a tail of stray messages. */
const requestScript: fc.Arbitrary<Script> = fc
  .record({
    mode: modeArb,
    method: fc.constantFrom('POST', 'POST', 'POST', 'GET', 'PUT', ''),
    path: fc.oneof(
      fc.constantFrom(...Object.values(PATH_OF)),
      fc.constantFrom('/v1/models', '/v1/chat/completions?x=1', '/', '/v1/requests/abc', ''),
    ),
    extra: headerList,
    body: bodyCase,
    cuts: fc.array(fc.nat(), { maxLength: 3 }),
    headersOnly: fc.boolean().map((b) => b && Math.random() < 0.1),
    open: fc.boolean().map((b) => b && Math.random() < 0.2),
    trailers: fc.boolean().map((b) => b && Math.random() < 0.3),
    tail: fc.array(
      fc.oneof(
        fc.constant<Op>({ t: 'trailers' }),
        fc.constantFrom<Op>({ t: 'resp', which: 'headers' }, { t: 'resp', which: 'body' }, { t: 'resp', which: 'trailers' }),
        fc.constant<Op>({ t: 'empty' }),
        fc.uint8Array({ maxLength: 64 }).map<Op>((d) => ({ t: 'body', data: Buffer.from(d), eos: false })),
        fc.constant<Op>({ t: 'cancel' }),
      ),
      { maxLength: 3 },
    ),
  })
  .map(({ mode, method, path, extra, body, cuts, headersOnly, open, trailers, tail }) => {
    const headers: Array<[string, string]> = [
      [':method', method],
      [':path', path],
      [':authority', 'fuzz.local'],
      [':scheme', 'http'],
      ...extra,
    ];
    const ops: Op[] = [{ t: 'headers', headers, eos: headersOnly }];
    if (!headersOnly) ops.push(...chunked(body.body, cuts, open || trailers));
    if (trailers) ops.push({ t: 'trailers' });
    ops.push(...tail);
    return { mode, ops };
  });

/** Anything at all: messages in any order. */
const chaosScript: fc.Arbitrary<Script> = fc.record({
  mode: modeArb,
  ops: fc.array(
    fc.oneof(
      headerList.map<Op>((headers) => ({ t: 'headers', headers, eos: false })),
      fc
        .record({ data: fc.uint8Array({ maxLength: 256 }), eos: fc.boolean() })
        .map<Op>(({ data, eos }) => ({ t: 'body', data: Buffer.from(data), eos })),
      fc.constant<Op>({ t: 'trailers' }),
      fc.constantFrom<Op>({ t: 'resp', which: 'headers' }, { t: 'resp', which: 'body' }, { t: 'resp', which: 'trailers' }),
      fc.constant<Op>({ t: 'empty' }),
    ),
    { maxLength: 8 },
  ),
});

const script: fc.Arbitrary<Script> = fc.oneof({ weight: 4, arbitrary: requestScript }, { weight: 1, arbitrary: chaosScript });

function play(s: EnvoyStream, sc: Script): boolean {
  let first = true;
  const opts = () => {
    const o = first && sc.mode ? { requestBodyMode: sc.mode } : undefined;
    first = false;
    return o;
  };
  const raw = s as unknown as { sendRaw(msg: Record<string, unknown>, o?: { requestBodyMode?: BodyModeName }): void };
  for (const op of sc.ops) {
    switch (op.t) {
      case 'headers':
        s.sendHeaders(op.headers, { endOfStream: op.eos, ...opts() });
        break;
      case 'body':
        raw.sendRaw({ request_body: { body: op.data, end_of_stream: op.eos } }, opts());
        break;
      case 'trailers':
        raw.sendRaw({ request_trailers: { trailers: { headers: [{ key: 'x-t', raw_value: Buffer.from('1') }] } } }, opts());
        break;
      case 'resp':
        if (op.which === 'headers')
          raw.sendRaw({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } }, opts());
        else if (op.which === 'body') raw.sendRaw({ response_body: { body: Buffer.from('x'), end_of_stream: true } }, opts());
        else raw.sendRaw({ response_trailers: { trailers: { headers: [] } } }, opts());
        break;
      case 'empty':
        raw.sendRaw({}, opts());
        break;
      case 'cancel':
        // A reset a few ms after the last message, as Envoy sends when the client goes away. A reset
        // within microseconds of the stream's start can be missed by grpc-js (known issue, see
        // test/faults/grpc-cancel-race.test.ts), which would only measure that bug here.
        setTimeout(() => s.cancel(), 5);
        return false;
    }
  }
  return true;
}

/** `error.code` of our OpenAI-style error body, if it is one. */
function errorCode(body: Buffer): number | undefined {
  try {
    const code = (JSON.parse(body.toString('utf8')) as { error?: { code?: unknown } }).error?.code;
    return typeof code === 'number' ? code : undefined;
  } catch {
    return undefined;
  }
}

function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no end after ${ms} ms`)), ms);
    }),
  ]);
}

describe('ext_proc protocol fuzzing against the real service', () => {
  let sim: Simulator;
  let service: RunningService;
  let client: EnvoyClient;
  let streamsOnClient = 0;
  const rejections: unknown[] = [];
  const onRejection = (r: unknown): void => void rejections.push(r);

  beforeAll(async () => {
    process.on('unhandledRejection', onRejection);
    sim = await startSimulator({ name: 'sim-fuzz', role: 'any', maxRecordedRequests: 10, maxRecordedBytes: 1024 * 1024 });
    const config = parseConfig(
      {
        log_level: 1,
        server: { listen_addr: '127.0.0.1:0', metrics_addr: '127.0.0.1:0', max_request_body_size: 4 },
        gateway: { address: sim.url, timeout: '5s' },
        pipeline: {
          kv_connector: 'kv-nixl',
          steps: [
            // Only 127.0.0.1 passes the allowlist, and the guard then blocks it: no download ever dials.
            { type: 'replace-media-urls', params: { allowed_domains: ['127.0.0.1'], max_multimodal_entries: 8, download_timeout: '1s' } },
            { type: 'render', params: { address: sim.url, timeout: '5s' } },
            { type: 'encode' },
            { type: 'prefill' },
            { type: 'decode' },
          ],
        },
      },
      {},
    );
    service = await startService(config, { log: silentLogger() });
    client = new EnvoyClient(service.grpcPort);
  });

  afterAll(async () => {
    client?.close();
    await service?.close(1000);
    await sim?.close();
    process.off('unhandledRejection', onRejection);
  });

  it(
    'every stream ends cleanly; nothing crashes, leaks or stays in flight',
    async () => {
      const rssBefore = process.memoryUsage().rss;
      try {
        await fc.assert(
          fc.asyncProperty(script, async (sc) => {
            sim.clear();
            // A fresh HTTP/2 session now and then: nghttp2 closes a session after about 1000 client
            // resets at more than 33/s (rapid-reset protection), a known issue pinned in
            // test/faults/grpc-cancel-race.test.ts, which would only be measured again here.
            if (++streamsOnClient >= 400) {
              client.close();
              client = new EnvoyClient(service.grpcPort);
              streamsOnClient = 0;
            }
            const s = client.open();
            const halfClose = play(s, sc);
            if (halfClose) s.end();
            const messages: ProcessingResponseMsg[] = await withDeadline(s.rest(), 15_000, 'stream');
            const status: StatusObject = await withDeadline(s.status, 5_000, 'status');
            for (const m of messages) expect(RESPONSES.has(m.response)).toBe(true);
            // OK after our half-close; CANCELLED (client side) after our reset.
            expect(`${status.code} ${status.details}`).toMatch(halfClose ? /^0 / : /^[01] /);
            // At most one immediate response, and it is the last message.
            const immediate = messages.findIndex((m) => m.response === 'immediate_response');
            if (immediate >= 0) {
              expect(immediate).toBe(messages.length - 1);
              // A 5xx is ours only when no worker failed: with healthy workers, it is a bug.
              const code = errorCode(messages[immediate]!.immediate_response!.body);
              const workerFailed = sim.requests.some((r) => (r.status ?? 0) >= 500);
              if (code !== undefined && code >= 500 && !workerFailed) {
                throw new Error(
                  `a ${code} with healthy workers: ${messages[immediate]!.immediate_response!.body.toString('utf8').slice(0, 300)}`,
                );
              }
            }
            for (let i = 0; i < 100 && service.activeStreams() > 0; i++) await new Promise((r) => setImmediate(r));
            for (let i = 0; i < 400 && service.activeStreams() > 0; i++) await new Promise((r) => setTimeout(r, 5));
            expect(service.activeStreams()).toBe(0);
            expect(rejections).toEqual([]);
          }),
          fuzzParameters('protocol'),
        );
      } catch (err) {
        throw shortReport('protocol', err);
      }

      // Still serving a plain request afterwards.
      const s = client.open();
      s.sendHeaders(
        [
          [':method', 'POST'],
          [':path', '/v1/completions'],
          ['x-request-id', 'after-fuzz'],
        ],
        { requestBodyMode: 'FULL_DUPLEX_STREAMED' },
      );
      s.sendBody(Buffer.from(JSON.stringify({ model: 'sim-model', prompt: [1, 2, 3], max_tokens: 2 })), true);
      const answer = await s.next();
      expect(answer.response).toBe('request_headers');
      s.end();
      await s.rest();

      const grownMb = (process.memoryUsage().rss - rssBefore) / (1024 * 1024);
      expect(grownMb).toBeLessThan(512);
    },
    fuzzTimeout('protocol', 30),
  );
});
