/**
 * `server.max_request_headers`: Envoy re-checks the request's header count after our mutation
 * (pseudo-headers and its own headers included) and answers a bare 500 when we push it over. An
 * inference request whose map leaves no room for the headers our forward may add is answered 431
 * (OpenAI JSON) at headers time instead, before any step or side call.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { AlwaysOnSampler, InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { startSimulator } from '../../sim/simulator';
import { parseConfig } from '../../src/config/config';
import { ConfigError } from '../../src/config/errors';
import {
  DEFAULT_MAX_REQUEST_HEADERS,
  exceedsHeaderBudget,
  FORWARD_HEADER_NAMES,
  MAX_FORWARD_ADDED_HEADERS,
} from '../../src/extproc/header-budget';
import type { HeaderMapIn } from '../../src/extproc/wire';
import { FORWARD_CONFIGURABLE_HEADERS } from '../../src/pipeline/forward-headers';
import { silentLogger } from '../../src/observability/logger';
import { startService } from '../../src/service';
import { EnvoyClient, headerEntries, structToJson, type EnvoyStream, type ProcessingResponseMsg } from './envoy-client';
import { NS, startHarness, useServiceWithSimulator, type Harness } from './harness';
import { startExtProcServer, type ExtProcServer } from '../../src/extproc';
import { PipelineHandler } from '../../src/pipeline/handler';
import { NOOP_REQUEST_OBSERVATION, type PipelineObserver, type RequestResult } from '../../src/pipeline/observer';

const PSEUDO: Array<[string, string]> = [
  [':method', 'POST'],
  [':path', '/v1/completions'],
  [':authority', 'gateway.local'],
  [':scheme', 'http'],
];

/** `total` entries: the four pseudo-headers, then `named`, then x-h0, x-h1, ... */
function headerList(total: number, named: Array<[string, string]> = [], pseudo = PSEUDO): Array<[string, string]> {
  const out = [...pseudo, ...named];
  for (let i = 0; out.length < total; i++) out.push([`x-h${i}`, 'v']);
  return out;
}

function mapOf(list: Array<[string, string]>): HeaderMapIn {
  return { headers: list.map(([key, value]) => ({ key, value: '', raw_value: Buffer.from(value) })) };
}

const BODY = Buffer.from(JSON.stringify({ model: 'm', prompt: [1, 2, 3], max_tokens: 1 }));

describe('the count (exceedsHeaderBudget)', () => {
  it(`leaves room for ${MAX_FORWARD_ADDED_HEADERS} headers when the request has none of ours: limit passes, limit + 1 is over`, () => {
    const allowed = DEFAULT_MAX_REQUEST_HEADERS - MAX_FORWARD_ADDED_HEADERS;
    expect(exceedsHeaderBudget(mapOf(headerList(allowed)), DEFAULT_MAX_REQUEST_HEADERS)).toBeNull();
    expect(exceedsHeaderBudget(mapOf(headerList(allowed + 1)), DEFAULT_MAX_REQUEST_HEADERS)).toEqual({ entries: allowed + 1, allowed });
  });

  it('a header of ours the request already has is replaced, not added: it needs no room', () => {
    const named = FORWARD_HEADER_NAMES.map((n): [string, string] => [n, 'x']);
    const allowed = DEFAULT_MAX_REQUEST_HEADERS - FORWARD_CONFIGURABLE_HEADERS;
    expect(exceedsHeaderBudget(mapOf(headerList(allowed, named)), DEFAULT_MAX_REQUEST_HEADERS)).toBeNull();
    expect(exceedsHeaderBudget(mapOf(headerList(allowed + 1, named)), DEFAULT_MAX_REQUEST_HEADERS)).toEqual({
      entries: allowed + 1,
      allowed,
    });
    // Counted once however often it repeats, and whatever its case.
    const twice = headerList(allowed, [
      ['Epp-Profile', 'a'],
      ['epp-profile', 'b'],
    ]);
    expect(exceedsHeaderBudget(mapOf(twice), DEFAULT_MAX_REQUEST_HEADERS)).toEqual({
      entries: allowed,
      allowed: DEFAULT_MAX_REQUEST_HEADERS - MAX_FORWARD_ADDED_HEADERS + 1,
    });
  });

  it('0 turns the check off; an empty map is within any limit', () => {
    expect(exceedsHeaderBudget(mapOf(headerList(5000)), 0)).toBeNull();
    expect(exceedsHeaderBudget(null, DEFAULT_MAX_REQUEST_HEADERS)).toBeNull();
  });
});

describe('at request_headers (the pipeline handler)', () => {
  const LIMIT = 20;
  const ALLOWED = LIMIT - MAX_FORWARD_ADDED_HEADERS;
  let server: ExtProcServer;
  let client: EnvoyClient;
  let stepRuns = 0;
  const results: RequestResult[] = [];
  const decided: string[] = [];
  const observer: PipelineObserver = {
    requestStarted: () => ({ ...NOOP_REQUEST_OBSERVATION, finished: (r) => void results.push(r) }),
    decided: (path) => void decided.push(path),
  };
  beforeAll(async () => {
    const step = { type: 'count', execute: async () => void stepRuns++ };
    const handler = new PipelineHandler({ steps: [step], maxBodyBytes: 1024 * 1024, log: silentLogger(), observer });
    server = await startExtProcServer({
      address: '127.0.0.1:0',
      handler,
      maxBodyBytes: 1024 * 1024,
      metadataNamespace: NS,
      fallbackBodyMode: 'full_duplex',
      log: silentLogger(),
      maxRequestHeaders: LIMIT,
    });
    client = new EnvoyClient(server.port);
  });
  afterAll(async () => {
    client.close();
    await server.shutdown(1000);
  });
  beforeEach(() => {
    stepRuns = 0;
    results.length = 0;
    decided.length = 0;
  });

  async function send(
    list: Array<[string, string]>,
    mode: 'FULL_DUPLEX_STREAMED' | 'BUFFERED',
  ): Promise<{ first: ProcessingResponseMsg; s: EnvoyStream }> {
    const s = client.open();
    s.sendHeaders(list, { requestBodyMode: mode });
    if (mode === 'FULL_DUPLEX_STREAMED') s.sendBody(BODY, true);
    return { first: await s.next(), s };
  }

  it.each(['FULL_DUPLEX_STREAMED', 'BUFFERED'] as const)(
    '%s: at the limit the pipeline runs; one more is a 431, observed, and no step runs',
    async (mode) => {
      const ok = await send(headerList(ALLOWED), mode);
      expect(ok.first.response).toBe('request_headers');
      if (mode === 'BUFFERED') {
        ok.s.sendBody(BODY, true);
        expect((await ok.s.next()).response).toBe('request_body');
      }
      ok.s.end();
      await ok.s.rest();
      expect(stepRuns).toBe(1);

      stepRuns = 0;
      results.length = 0;
      const over = await send(headerList(ALLOWED + 1), mode);
      expect(over.first.response).toBe('immediate_response');
      const imm = over.first.immediate_response!;
      expect(imm.status!.code).toBe('RequestHeaderFieldsTooLarge');
      expect(headerEntries(imm.headers)['content-type']).toBe('application/json');
      expect(JSON.parse(imm.body.toString())).toEqual({
        error: {
          message: expect.stringMatching(
            new RegExp(`^request has too many headers \\(${ALLOWED + 1}\\); the limit is ${ALLOWED} \\(request_id: [0-9a-f-]{36}\\)$`),
          ),
          type: 'invalid_request_error',
          param: null,
          code: 431,
        },
      });
      expect(structToJson(over.first.dynamic_metadata)[NS]).toEqual(
        expect.objectContaining({ status: 431, path_taken: 'error', error_class: 'bad_request', error_step: 'headers' }),
      );
      over.s.end();
      expect(await over.s.rest()).toEqual([]);
      expect((await over.s.status).code).toBe(grpc.status.OK);
      expect(stepRuns).toBe(0);
      // The observer (metrics, tracing) sees the 431 like every other answer.
      expect(results).toEqual([
        expect.objectContaining({ path: 'error', status: 431, errorClass: 'bad_request', errorStep: 'headers', stepsStarted: [] }),
      ]);
    },
  );

  it("the client's x-request-id, when valid, is the one in the error", async () => {
    const { first, s } = await send(headerList(LIMIT, [['x-request-id', 'abc-123']]), 'FULL_DUPLEX_STREAMED');
    expect(JSON.parse(first.immediate_response!.body.toString()).error.message).toMatch(/\(request_id: abc-123\)$/);
    s.end();
    await s.rest();
  });

  it('requests not on the inference paths are refused too: their forward carries our headers as well', async () => {
    for (const pseudo of [
      [
        [':method', 'POST'],
        [':path', '/v1/embeddings'],
      ],
      [
        [':method', 'GET'],
        [':path', '/v1/completions'],
      ],
    ] as Array<Array<[string, string]>>) {
      const { first, s } = await send(headerList(LIMIT * 3, [], pseudo), 'FULL_DUPLEX_STREAMED');
      expect(first.response).toBe('immediate_response');
      expect(first.immediate_response!.status!.code).toBe('RequestHeaderFieldsTooLarge');
      s.end();
      await s.rest();
    }
    // Answered from the head: counted as refused, nothing was passed through and no pipeline ran.
    expect(decided).toEqual(['error', 'error']);
    expect(results).toEqual([]);
  });

  it('a query string does not hide an inference path', async () => {
    const list = headerList(
      ALLOWED + 1,
      [],
      [
        [':method', 'POST'],
        [':path', '/v1/chat/completions?x=1'],
      ],
    );
    const { first, s } = await send(list, 'FULL_DUPLEX_STREAMED');
    expect(first.response).toBe('immediate_response');
    s.end();
    await s.rest();
  });
});

describe('the protocol layer only flags the head (scripted handler)', () => {
  const LIMIT = 20;
  const ALLOWED = LIMIT - MAX_FORWARD_ADDED_HEADERS;
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('full_duplex', 1024 * 1024, { maxRequestHeaders: LIMIT });
  });
  afterAll(() => h.close());

  it('the head carries the count only when over; an exchange that does not refuse runs as usual', async () => {
    h.handler.reset(() => ({}));
    for (const n of [ALLOWED, ALLOWED + 1]) {
      const s = h.client.open();
      s.sendHeaders(headerList(n), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
      s.sendBody(BODY, true);
      expect((await s.next()).response).toBe('request_headers');
      s.end();
      await s.rest();
    }
    expect(h.handler.heads.map((head) => head.headerBudgetExceeded)).toEqual([undefined, { entries: ALLOWED + 1, allowed: ALLOWED }]);
  });
});

describe('with the real pipeline and the default limit', () => {
  const env = useServiceWithSimulator();

  it(`${DEFAULT_MAX_REQUEST_HEADERS - MAX_FORWARD_ADDED_HEADERS} entries are forwarded; one more is our 431 and no side call is made`, async () => {
    const allowed = DEFAULT_MAX_REQUEST_HEADERS - MAX_FORWARD_ADDED_HEADERS;
    env.sim.clear();
    const ok = env.client.open();
    ok.sendHeaders(headerList(allowed), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    ok.sendBody(BODY, true);
    expect(headerEntries((await ok.next()).request_headers!.response!.header_mutation)['epp-profile']).toBe('decode');
    ok.end();
    await ok.rest();
    expect(env.sim.requests).toHaveLength(1);

    env.sim.clear();
    const over = env.client.open();
    over.sendHeaders(headerList(allowed + 1), { requestBodyMode: 'FULL_DUPLEX_STREAMED' });
    over.sendBody(BODY, true);
    const imm = (await over.next()).immediate_response!;
    expect(imm.status!.code).toBe('RequestHeaderFieldsTooLarge');
    expect(JSON.parse(imm.body.toString()).error.code).toBe(431);
    over.end();
    await over.rest();
    expect(env.sim.requests).toHaveLength(0);
  });
});

/**
 * MAX_FORWARD_ADDED_HEADERS is only right while it lists every header our forward can add. Two
 * guards: a run with every header-setting feature on (tracing, kv-nixl data-parallel ranks, a
 * BUFFERED body without content-length) must set exactly the listed names; and every place in src/
 * that stamps a header on the final request must be one this list was built from.
 */
describe('every header the forward can add is counted', () => {
  it('a forward with tracing, kv-nixl dp ranks and a BUFFERED chunked body sets exactly FORWARD_HEADER_NAMES', async () => {
    const sim = await startSimulator({ name: 'sim-any', role: 'any' });
    const exporter = new InMemorySpanExporter();
    const nixl = { kv_connector: 'kv-nixl', dp_size: 2 };
    const service = await startService(
      parseConfig(
        {
          tracing: true,
          server: { listen_addr: '127.0.0.1:0', metrics_addr: '', body_mode: 'buffered' },
          gateway: { address: sim.url },
          pipeline: {
            steps: [
              { type: 'prefill', params: nixl },
              { type: 'decode', params: nixl },
            ],
          },
        },
        {},
      ),
      { log: silentLogger(), spanExporter: exporter, spanSampler: new AlwaysOnSampler() },
    );
    const client = new EnvoyClient(service.grpcPort);
    try {
      const s = client.open();
      s.sendHeaders(PSEUDO, { requestBodyMode: 'BUFFERED' });
      expect((await s.next()).response).toBe('request_headers');
      s.sendBody(BODY, true);
      const reply = (await s.next()).request_body!.response!;
      expect(reply.body_mutation?.body).toBeDefined();
      expect(Object.keys(headerEntries(reply.header_mutation)).sort()).toEqual([...FORWARD_HEADER_NAMES].sort());
      s.end();
      await s.rest();
    } finally {
      client.close();
      await service.close(500);
      await sim.close();
    }
  });

  it('the places in src/ that set headers on the final request are the ones the list was built from', () => {
    const root = join(__dirname, '../../src');
    const sites: string[] = [];
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const path = join(dir, name);
        if (statSync(path).isDirectory()) walk(path);
        else if (name.endsWith('.ts')) scan(relative(root, path), readFileSync(path, 'utf8'));
      }
    };
    const scan = (file: string, text: string): void => {
      for (const m of text.matchAll(/\.stampHeader\(\s*([^,]+?)\s*,/g)) sites.push(`${file} stampHeader ${m[1]}`);
      for (const m of text.matchAll(/decodeHeaders:\s*\([^)]*\)\s*=>\s*\(\{\s*\[([A-Z_]+)\]/g)) sites.push(`${file} decodeHeaders ${m[1]}`);
      for (const m of text.matchAll(/ctx\.decode = \{\s*headers: \{([^}]*)\}/g)) {
        const keys = [...m[1]!.matchAll(/\[([A-Z_]+)\]:/g)].map((k) => k[1]).join(' ');
        sites.push(`${file} decode.headers ${keys}`);
      }
      for (const m of text.matchAll(/extraSet: [^{]*\{\s*'([a-z-]+)'/g)) sites.push(`${file} extraSet ${m[1]}`);
      for (const m of text.matchAll(/setHeaders: (\{[^}\n]*\})/g)) sites.push(`${file} setHeaders ${m[1]}`);
    };
    walk(root);
    // A new entry here means a new header on the forwarded request: add it to FORWARD_STAMPED_HEADERS
    // or FORWARD_CONFIGURABLE_HEADERS (src/pipeline/forward-headers.ts), then to this list.
    expect(sites.sort()).toEqual(
      [
        'connectors/kv/nixl.ts decodeHeaders HEADER_DATA_PARALLEL_RANK', // x-data-parallel-rank
        'extproc/responses.ts extraSet content-length',
        'observability/tracing.ts stampHeader TRACEPARENT', // traceparent
        'pipeline/pipeline-exchange.ts setHeaders { ...ctx.stampedHeaders() }',
        'pipeline/pipeline-exchange.ts setHeaders { ...ctx.stampedHeaders(), ...ctx.relayedHeaders(), ...ctx.decode.headers }', // relayed: FORWARD_CONFIGURABLE_HEADERS
        "pipeline/exchanges.ts setHeaders { 'epp-profile': 'decode', 'x-request-id': this.requestId }", // passthrough, as upstream
        'steps/async-broker/step.ts stampHeader name', // clearHeader: only a header the client sent
        'steps/async-broker/step.ts stampHeader this.config.fairnessHeader', // configurable name
        'steps/async-broker/step.ts stampHeader this.config.objectiveHeader', // configurable name
        'steps/decode.ts decode.headers HEADER_EPP_PROFILE HEADER_REQUEST_ID HEADER_CONTENT_TYPE',
        'steps/prefill-decode.ts decode.headers HEADER_EPP_PROFILE HEADER_REQUEST_ID HEADER_CONTENT_TYPE',
        'steps/prefill.ts stampHeader name', // kv.decodeHeaders (the nixl entry above)
      ].sort(),
    );
  });
});

describe('server.max_request_headers (config)', () => {
  const limit = (v: unknown) => parseConfig({ server: { max_request_headers: v } }, {}).server.maxRequestHeaders;
  it("defaults to the bootstrap's 85; 0 turns the check off; bounded", () => {
    expect(parseConfig({}, {}).server.maxRequestHeaders).toBe(85);
    expect(limit(0)).toBe(0);
    expect(limit(100)).toBe(100);
    expect(parseConfig({}, { COORDINATOR_SERVER_MAX_REQUEST_HEADERS: '90' }).server.maxRequestHeaders).toBe(90);
    for (const bad of [-1, 1.5, 'many', 70_000]) expect(() => limit(bad)).toThrow(ConfigError);
  });
});
