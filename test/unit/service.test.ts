/**
 * The wired service without Envoy (an Envoy-like gRPC client instead): health and readiness, the
 * drain, /metrics, trace-context propagation with tracing off and on, step lifecycle hooks, and
 * TLS / mTLS on the gRPC listener with start-up errors that name the key.
 */
import * as grpc from '@grpc/grpc-js';
import { AlwaysOnSampler, InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseConfig, type AppConfig } from '../../src/config/config';
import { ConfigError } from '../../src/config/errors';
import type { Step, StepFactory } from '../../src/pipeline/step';
import { silentLogger } from '../../src/observability/logger';
import { startService, type RunningService } from '../../src/service';
import { EnvoyClient, type EnvoyStream } from '../protocol/envoy-client';
import { FakeUpstream } from './steps/fake-upstream';
import { makeTestPki, type TestPki } from './observability/certs';
import { HealthProbe } from './observability/health-client';

const EXT_PROC = 'envoy.service.ext_proc.v3.ExternalProcessor';
const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const TRACEPARENT = `00-${TRACE_ID}-b7ad6b7169203331-01`;

function config(gateway: string, extra: { server?: Record<string, unknown>; tracing?: boolean; steps?: unknown[] } = {}): AppConfig {
  return parseConfig(
    {
      tracing: extra.tracing ?? false,
      server: { listen_addr: '127.0.0.1:0', metrics_addr: '127.0.0.1:0', shutdown_timeout: '5s', ...extra.server },
      gateway: { address: gateway, timeout: '5s' },
      pipeline: { steps: extra.steps ?? [{ type: 'prefill' }, { type: 'decode' }] },
    },
    {},
  );
}

function chat(extra: Array<[string, string]> = []): Array<[string, string]> {
  return [
    [':method', 'POST'],
    [':path', '/v1/chat/completions'],
    [':authority', 'gw'],
    [':scheme', 'http'],
    ['content-type', 'application/json'],
    ['x-request-id', `svc-${Math.random().toString(36).slice(2)}`],
    ...extra,
  ];
}

/** One buffered request as Envoy sends it; resolves with the body reply (or immediate response). */
async function request(client: EnvoyClient, extra: Array<[string, string]> = []): Promise<{ stream: EnvoyStream; reply: Promise<string> }> {
  const stream = client.open();
  stream.sendHeaders(chat(extra), { requestBodyMode: 'BUFFERED' });
  const reply = (async () => {
    let msg = await stream.next();
    while (msg.response === 'request_headers') {
      stream.sendBody(Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })), true);
      msg = await stream.next();
    }
    stream.end();
    await stream.status;
    return msg.response;
  })();
  return { stream, reply };
}

async function scrape(port: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

function sample(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`) || (labels === '' && l.startsWith(`${name} `)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

async function eventually(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let upstream: FakeUpstream;
beforeAll(async () => {
  upstream = await new FakeUpstream().start();
});
afterAll(() => upstream.stop());
beforeEach(() => upstream.reset());

describe('a running service', () => {
  let service: RunningService;
  let client: EnvoyClient;
  let health: HealthProbe;
  let ready = true;
  const exporter = new InMemorySpanExporter();

  beforeAll(async () => {
    service = await startService(config(upstream.url), {
      log: silentLogger(),
      readinessChecks: [async () => ready],
      readinessIntervalMs: 30,
      spanExporter: exporter,
    });
    client = new EnvoyClient(service.grpcPort);
    health = new HealthProbe(`127.0.0.1:${service.grpcPort}`);
  });
  afterAll(async () => {
    client.close();
    health.close();
    await service.close(0);
  });

  test('health: both services SERVING after start', async () => {
    expect(await health.check('')).toBe('SERVING');
    expect(await health.check(EXT_PROC)).toBe('SERVING');
  });

  test('a failing readiness check turns the ext_proc service NOT_SERVING (liveness stays SERVING), and back', async () => {
    ready = false;
    await eventually(async () => (await health.check(EXT_PROC)) === 'NOT_SERVING', 'NOT_SERVING');
    expect(await health.check('')).toBe('SERVING');
    ready = true;
    await eventually(async () => (await health.check(EXT_PROC)) === 'SERVING', 'SERVING again');
  });

  test('tracing off: the side call carries the client traceparent as sent, and no span is made', async () => {
    const { reply } = await request(client, [['traceparent', TRACEPARENT]]);
    expect(await reply).toBe('request_body');
    expect(upstream.seen).toHaveLength(1);
    expect(upstream.seen[0]!.headers['traceparent']).toBe(TRACEPARENT);
    expect(exporter.getFinishedSpans()).toHaveLength(0);
  });

  test('/metrics after traffic: request, step, side-call and stream series', async () => {
    const { reply } = await request(client);
    expect(await reply).toBe('request_body');
    const text = await scrape(service.metricsPort!);
    expect(sample(text, 'llm_d_coordinator_request_total', 'model_name="m"')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'llm_d_coordinator_step_duration_seconds_count', 'step="prefill"')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'llm_d_coordinator_upstream_request_total', 'upstream="prefill"')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'epd_coordinator_side_call_duration_seconds_count', 'phase="prefill",status="200"')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'epd_coordinator_extproc_stream_duration_seconds_count', '')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'epd_coordinator_decisions_total', 'path="cascade"')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'epd_coordinator_inflight_requests', '')).toBe(0);
  });

  // Last in this block: it drains the service.
  test('drain: NOT_SERVING, new streams refused, the in-flight stream completes, then the listener closes', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    upstream.respond = async () => {
      await gate;
      return { status: 200, body: {} };
    };
    const watch = health.watch(EXT_PROC);
    const inflight = await request(client);
    await eventually(() => upstream.seen.length === 1, 'the side call reached the upstream');

    const closing = service.close(10_000);
    expect(await health.check('')).toBe('NOT_SERVING');
    expect(await health.check(EXT_PROC)).toBe('NOT_SERVING');
    await eventually(() => watch.statuses.includes('NOT_SERVING'), 'Watch saw NOT_SERVING');
    expect(watch.statuses[0]).toBe('SERVING');

    const late = client.open();
    late.sendHeaders(chat(), { requestBodyMode: 'BUFFERED' });
    expect((await late.status).code).toBe(grpc.status.UNAVAILABLE);

    release();
    expect(await inflight.reply).toBe('request_body');
    await closing;
    watch.cancel();
    await expect(health.check('', 500)).rejects.toMatchObject({ code: expect.any(Number) });
  });
});

describe('tracing on', () => {
  test('a side call carries the client trace id and the span id of our side-call span', async () => {
    // Keeps the spans through shutdown (the in-memory exporter forgets them then).
    const exporter = new (class extends InMemorySpanExporter {
      override shutdown(): Promise<void> {
        return Promise.resolve();
      }
    })();
    const service = await startService(config(upstream.url, { tracing: true }), {
      log: silentLogger(),
      spanExporter: exporter,
      spanSampler: new AlwaysOnSampler(),
    });
    const client = new EnvoyClient(service.grpcPort);
    try {
      const { reply } = await request(client, [['traceparent', TRACEPARENT]]);
      expect(await reply).toBe('request_body');
      await service.close(0); // flushes the batch processor
      const sent = upstream.seen[0]!.headers['traceparent']!;
      expect(sent.split('-')[1]).toBe(TRACE_ID);
      const spans = exporter.getFinishedSpans();
      const sideCall = spans.find((s) => s.name === 'POST prefill');
      expect(sideCall).toBeDefined();
      expect(sent).toBe(`00-${TRACE_ID}-${sideCall!.spanContext().spanId}-01`);
      expect(new Set(spans.map((s) => s.name))).toEqual(
        new Set(['POST /v1/chat/completions', 'pipeline', 'prefill', 'decode', 'POST prefill']),
      );
    } finally {
      client.close();
      await service.close(0);
    }
  });
});

describe('step lifecycle (the optional Step hooks)', () => {
  test('start() runs before listening, ready() gates readiness, close() runs at shutdown', async () => {
    const calls: string[] = [];
    let healthy = true;
    const factory: StepFactory = (): Step => ({
      type: 'managed',
      execute: async () => undefined,
      start: async () => void calls.push('start'),
      ready: async () => healthy,
      close: async () => void calls.push('close'),
    });
    const service = await startService(config(upstream.url, { steps: [{ type: 'managed' }], server: { metrics_addr: 'off' } }), {
      log: silentLogger(),
      readinessIntervalMs: 30,
      registerSteps: (r) => r.register('managed', factory),
    });
    const health = new HealthProbe(`127.0.0.1:${service.grpcPort}`);
    try {
      expect(service.metricsPort).toBeNull();
      expect(calls).toEqual(['start']);
      expect(await health.check(EXT_PROC)).toBe('SERVING');
      healthy = false;
      await eventually(async () => (await health.check(EXT_PROC)) === 'NOT_SERVING', 'ready() false -> NOT_SERVING');
    } finally {
      health.close();
      await service.close(0);
    }
    expect(calls).toEqual(['start', 'close']);
  });

  test("a ping()-only dependency (the async broker's Redis) is reported on its own service and never takes readiness down", async () => {
    let up = true;
    const factory: StepFactory = (): Step => ({ type: 'queue', execute: async () => undefined, ping: async () => up });
    const service = await startService(config(upstream.url, { steps: [{ type: 'queue' }], server: { metrics_addr: 'off' } }), {
      log: silentLogger(),
      readinessIntervalMs: 30,
      registerSteps: (r) => r.register('queue', factory),
    });
    const health = new HealthProbe(`127.0.0.1:${service.grpcPort}`);
    const dep = 'epd.coordinator.dependency.queue';
    try {
      expect(await health.check(dep)).toBe('SERVING');
      up = false;
      await eventually(async () => (await health.check(dep)) === 'NOT_SERVING', 'ping() false -> dependency NOT_SERVING');
      expect(await health.check(EXT_PROC)).toBe('SERVING');
      up = true;
      await eventually(async () => (await health.check(dep)) === 'SERVING', 'ping() true again -> dependency SERVING');
    } finally {
      health.close();
      await service.close(0);
    }
  });

  test('a step whose start() fails stops start-up, and what was opened is closed', async () => {
    const closed: string[] = [];
    const factory: StepFactory = (): Step => ({
      type: 'broken',
      execute: async () => undefined,
      start: async () => {
        throw new Error('redis unreachable');
      },
      close: async () => void closed.push('close'),
    });
    await expect(
      startService(config(upstream.url, { steps: [{ type: 'broken' }] }), {
        log: silentLogger(),
        registerSteps: (r) => r.register('broken', factory),
      }),
    ).rejects.toThrow('redis unreachable');
    expect(closed).toEqual(['close']);
  });
});

describe('a gateway step without gateway.address', () => {
  test.each([
    [[{ type: 'prefill' }, { type: 'decode' }], 'prefill'],
    [[{ type: 'decode' }], 'decode'],
    [[{ type: 'encode' }, { type: 'decode' }], 'encode'],
    [[{ type: 'conditional-decode' }, { type: 'decode' }], 'conditional-decode'],
    [[{ type: 'prefill-decode', params: { kv_connector: 'kv-sglang' } }], 'prefill-decode'],
  ])('%j stops start-up, naming gateway.address and the %s step', async (steps, step) => {
    const cfg = parseConfig({ server: { listen_addr: '127.0.0.1:0', metrics_addr: 'off' }, pipeline: { steps } }, {});
    expect(cfg.gateway.address).toBe('');
    const attempt = startService(cfg, { log: silentLogger() });
    await expect(attempt).rejects.toThrow(ConfigError);
    await expect(attempt).rejects.toThrow(
      `gateway.address: expected an http:// or https:// URL (the "${step}" step sends its side calls to the gateway)`,
    );
  });

  test('a pipeline with no gateway step starts without one', async () => {
    const factory: StepFactory = (): Step => ({ type: 'local', execute: async () => undefined });
    const cfg = parseConfig({ server: { listen_addr: '127.0.0.1:0', metrics_addr: 'off' }, pipeline: { steps: [{ type: 'local' }] } }, {});
    const service = await startService(cfg, { log: silentLogger(), registerSteps: (r) => r.register('local', factory) });
    await service.close(0);
  });
});

describe('TLS on the gRPC listener', () => {
  let pki: TestPki;
  beforeAll(() => {
    pki = makeTestPki();
  });
  afterAll(() => pki.remove());

  const tlsConfig = (tls: Record<string, string>) => config(upstream.url, { server: { metrics_addr: '', ...tls } });

  test('TLS: a client trusting the CA gets SERVING; a plaintext client does not get through', async () => {
    const service = await startService(tlsConfig({ tls_cert_file: pki.serverCert, tls_key_file: pki.serverKey }), { log: silentLogger() });
    const secure = new HealthProbe(`127.0.0.1:${service.grpcPort}`, grpc.credentials.createSsl(pki.read(pki.caCert)));
    const plain = new HealthProbe(`127.0.0.1:${service.grpcPort}`);
    try {
      expect(await secure.check(EXT_PROC)).toBe('SERVING');
      await expect(plain.check('', 1000)).rejects.toMatchObject({ code: expect.any(Number) });
    } finally {
      secure.close();
      plain.close();
      await service.close(0);
    }
  });

  test('mTLS: refused without a client certificate and with one from another CA; accepted with ours', async () => {
    const service = await startService(
      tlsConfig({ tls_cert_file: pki.serverCert, tls_key_file: pki.serverKey, tls_client_ca_file: pki.caCert }),
      { log: silentLogger() },
    );
    const target = `127.0.0.1:${service.grpcPort}`;
    const ca = pki.read(pki.caCert);
    const anonymous = new HealthProbe(target, grpc.credentials.createSsl(ca));
    const stranger = new HealthProbe(target, grpc.credentials.createSsl(ca, pki.read(pki.strangerKey), pki.read(pki.strangerCert)));
    const trusted = new HealthProbe(target, grpc.credentials.createSsl(ca, pki.read(pki.clientKey), pki.read(pki.clientCert)));
    try {
      await expect(anonymous.check('', 1500)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
      await expect(stranger.check('', 1500)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
      expect(await trusted.check(EXT_PROC)).toBe('SERVING');
    } finally {
      for (const p of [anonymous, stranger, trusted]) p.close();
      await service.close(0);
    }
  });

  test('bad files stop start-up with the key named', async () => {
    const notPem = join(pki.dir, 'not.pem');
    writeFileSync(notPem, 'hello');
    const cases: Array<[Record<string, string>, RegExp]> = [
      [
        { tls_cert_file: join(pki.dir, 'missing.crt'), tls_key_file: pki.serverKey },
        /^server\.tls_cert_file: expected a readable PEM file/,
      ],
      [{ tls_cert_file: notPem, tls_key_file: pki.serverKey }, /^server\.tls_cert_file: expected a PEM certificate/],
      [{ tls_cert_file: pki.serverCert, tls_key_file: notPem }, /^server\.tls_key_file: expected an unencrypted PEM private key/],
      [
        { tls_cert_file: pki.serverCert, tls_key_file: pki.clientKey },
        /^server\.tls_key_file: expected the private key of the certificate/,
      ],
      [
        { tls_cert_file: pki.serverCert, tls_key_file: pki.serverKey, tls_client_ca_file: notPem },
        /^server\.tls_client_ca_file: expected a PEM certificate/,
      ],
    ];
    for (const [tls, message] of cases) {
      const attempt = startService(tlsConfig(tls), { log: silentLogger() });
      await expect(attempt).rejects.toThrow(ConfigError);
      await expect(attempt).rejects.toThrow(message);
    }
  });
});
