/**
 * Issue #6 acceptance through the real Envoy: /metrics after traffic, gRPC health and the SIGTERM
 * drain of the real process (`node src/main.ts`), TLS and mTLS between Envoy and the service, and
 * W3C trace context on the side calls with tracing off and on.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InMemorySpanExporter, AlwaysOnSampler } from '@opentelemetry/sdk-trace-base';
import yaml from 'js-yaml';
import { REPO_ROOT, type ExtProcTlsOptions } from '../../launch/envoy-bootstrap';
import { startSimulator, type Simulator } from '../../sim/simulator';
import { parseConfig } from '../../src/config/config';
import { silentLogger } from '../../src/observability/logger';
import { startService, type RunningService, type ServiceOptions } from '../../src/service';
import { TestClient, type ClientResponse } from '../../launch/client';
import { startEnvoy, type EnvoyHandle } from '../../launch/envoy';
import { freePort, waitUntil } from '../../launch/ports';
import { sample, samples } from '../support/metrics-text';
import { defaultSteps, stackConfigDoc, startStack, type Stack } from '../support/stack';
import { makeTestPki, type TestPki } from '../unit/observability/certs';
import { HealthProbe } from '../unit/observability/health-client';

const MODEL = 'sim-model';
const EXT_PROC = 'envoy.service.ext_proc.v3.ExternalProcessor';
const TRACE_ID = '5b8efff798038103d269b633813fc60c';
const TRACEPARENT = `00-${TRACE_ID}-eee19b7ec3c1b174-01`;

const chatBody = (content = 'hello operations') => ({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 20 });

async function scrape(port: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

interface Workers {
  readonly render: Simulator;
  readonly encode: Simulator;
  readonly prefill: Simulator;
  readonly decode: Simulator;
}

async function startWorkers(): Promise<Workers> {
  const [render, encode, prefill, decode] = await Promise.all(
    (['render', 'encode', 'prefill', 'decode'] as const).map((role) => startSimulator({ name: `sim-${role}-0`, role, port: 0 })),
  );
  return { render: render!, encode: encode!, prefill: prefill!, decode: decode! };
}

async function closeWorkers(w: Workers | undefined): Promise<void> {
  if (w) await Promise.all(Object.values(w).map((s: Simulator) => s.close().catch(() => undefined)));
}

/** Envoy in front of a coordinator at `grpcPort`, its gateway listener on `gatewayPort`. */
function envoyFor(dir: string, w: Workers, grpcPort: number, gatewayPort: number, extProcTls?: ExtProcTlsOptions): Promise<EnvoyHandle> {
  return startEnvoy({
    dir,
    bootstrap: {
      bodyMode: 'full_duplex',
      gatewayPort,
      extProcAddress: `127.0.0.1:${grpcPort}`,
      encodeAddress: `127.0.0.1:${w.encode.port}`,
      prefillAddress: `127.0.0.1:${w.prefill.port}`,
      decodeAddress: `127.0.0.1:${w.decode.port}`,
      extProcTls,
    },
  });
}

/** An in-process service with extra config keys, behind its own Envoy. */
async function startCustom(
  dir: string,
  w: Workers,
  extra: { server?: Record<string, unknown>; tracing?: boolean },
  serviceOpts: ServiceOptions = {},
  extProcTls?: ExtProcTlsOptions,
): Promise<{ service: RunningService; envoy: EnvoyHandle; gatewayPort: number }> {
  const gatewayPort = await freePort();
  const doc = stackConfigDoc({}, { gateway: `http://127.0.0.1:${gatewayPort}`, render: w.render.url });
  const config = parseConfig({ ...doc, tracing: extra.tracing ?? false, server: { ...(doc['server'] as object), ...extra.server } }, {});
  const service = await startService(config, { log: silentLogger(), ...serviceOpts });
  try {
    const envoy = await envoyFor(dir, w, service.grpcPort, gatewayPort, extProcTls);
    return { service, envoy, gatewayPort };
  } catch (err) {
    await service.close(0);
    throw err;
  }
}

describe('metrics, health and trace context through Envoy', () => {
  let stack: Stack;
  let client: TestClient;
  let health: HealthProbe;

  beforeAll(async () => {
    stack = await startStack();
    client = new TestClient(stack.publicUrl);
    health = new HealthProbe(`127.0.0.1:${stack.service.grpcPort}`);
  });
  afterAll(async () => {
    health?.close();
    await client?.close();
    await stack?.close();
  });

  test('health: SERVING for "" and for the ext_proc service', async () => {
    expect(await health.check('')).toBe('SERVING');
    expect(await health.check(EXT_PROC)).toBe('SERVING');
  });

  test('/metrics after traffic has request, step and side-call series with sensible values', async () => {
    const n = 3;
    for (let i = 0; i < n; i++) {
      const res = await client.post('/v1/chat/completions', chatBody(`request ${i}`), { headers: { traceparent: TRACEPARENT } });
      expect(res.status).toBe(200);
    }
    // Tracing is off: the client's trace context reached the side calls as sent (through both listeners).
    for (const r of stack.sims.prefill.requests) expect(r.headers['traceparent']).toBe(TRACEPARENT);
    expect(stack.sims.prefill.requests).toHaveLength(n);

    // Streams end once Envoy has the final answer; wait for the last one to be closed.
    await waitUntil(
      async () => sample(await scrape(stack.service.metricsPort!), 'epd_coordinator_extproc_active_streams') === 0,
      'streams closed',
      5000,
    );
    const text = await scrape(stack.service.metricsPort!);
    const model = `model_name="${MODEL}"`;
    expect(sample(text, 'llm_d_coordinator_request_total', model)).toBe(n);
    expect(sample(text, 'llm_d_coordinator_request_duration_seconds_count', model)).toBe(n);
    expect(sample(text, 'llm_d_coordinator_request_duration_seconds_sum', model)).toBeGreaterThan(0);
    expect(sample(text, 'llm_d_coordinator_request_size_bytes_count', model)).toBe(n);
    expect(sample(text, 'llm_d_coordinator_request_input_tokens_count', model)).toBe(n);
    expect(sample(text, 'llm_d_coordinator_request_input_tokens_sum', model)).toBeGreaterThanOrEqual(n);
    expect(sample(text, 'llm_d_coordinator_request_running', model)).toBe(0);
    expect(samples(text, 'llm_d_coordinator_request_error_total').size).toBe(0);
    for (const step of ['render', 'prefill', 'decode']) {
      expect(sample(text, 'llm_d_coordinator_step_duration_seconds_count', `step="${step}"`)).toBe(n);
      expect(sample(text, 'llm_d_coordinator_step_running', `step="${step}"`)).toBe(0);
    }
    expect(sample(text, 'llm_d_coordinator_step_duration_seconds_sum', 'step="prefill"')).toBeGreaterThan(0);
    expect(sample(text, 'llm_d_coordinator_upstream_request_total', 'upstream="render"')).toBe(n);
    expect(sample(text, 'llm_d_coordinator_upstream_request_total', 'upstream="prefill"')).toBe(n);
    expect(sample(text, 'epd_coordinator_side_call_duration_seconds_count', 'phase="prefill",status="200"')).toBe(n);
    expect(sample(text, 'epd_coordinator_side_call_duration_seconds_count', 'phase="render",status="200"')).toBe(n);
    // The side call's latency is part of its step's.
    expect(sample(text, 'epd_coordinator_side_call_duration_seconds_sum', 'phase="prefill",status="200"')!).toBeLessThanOrEqual(
      sample(text, 'llm_d_coordinator_step_duration_seconds_sum', 'step="prefill"')!,
    );
    expect(sample(text, 'llm_d_coordinator_execution_path_total', `${model},path="prefill-decode"`)).toBe(n);
    expect(sample(text, 'epd_coordinator_decisions_total', 'path="cascade"')).toBe(n);
    expect(sample(text, 'epd_coordinator_extproc_stream_duration_seconds_count')).toBeGreaterThanOrEqual(n);
    expect(sample(text, 'epd_coordinator_inflight_requests')).toBe(0);
    expect(sample(text, 'llm_d_coordinator_orchestration_overhead_seconds_count', 'route="chat_completions"')).toBe(n);
  });

  test('a failing side call shows up as step and request errors with its status', async () => {
    stack.reset();
    // Every prefill attempt fails (the step may retry a 5xx through the gateway).
    stack.sims.prefill.setFaults([{ status: 503 }]);
    try {
      const res = await client.post('/v1/chat/completions', chatBody('fail'));
      expect(res.status).toBe(502);
    } finally {
      stack.sims.prefill.setFaults([]);
    }
    const attempts = stack.sims.prefill.requests.length;
    expect(attempts).toBeGreaterThanOrEqual(1);
    const text = await scrape(stack.service.metricsPort!);
    expect(sample(text, 'epd_coordinator_side_call_duration_seconds_count', 'phase="prefill",status="503"')).toBe(attempts);
    expect(sample(text, 'llm_d_coordinator_step_errors_total', 'step="prefill",error_code="upstream_5xx"')).toBe(1);
    expect(sample(text, 'llm_d_coordinator_request_error_total', `model_name="${MODEL}",error_code="upstream_5xx"`)).toBe(1);
    expect(sample(text, 'epd_coordinator_decisions_total', 'path="error"')).toBe(1);
  });
});

describe('tracing on, through Envoy', () => {
  let dir: string;
  let workers: Workers | undefined;
  let running: Awaited<ReturnType<typeof startCustom>> | undefined;
  let client: TestClient;
  // Keeps spans through shutdown (the in-memory exporter forgets them then).
  const exporter = new (class extends InMemorySpanExporter {
    override shutdown(): Promise<void> {
      return Promise.resolve();
    }
  })();

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-ops-trace-'));
    workers = await startWorkers();
    running = await startCustom(
      join(dir, 'envoy'),
      workers,
      { tracing: true },
      { spanExporter: exporter, spanSampler: new AlwaysOnSampler() },
    );
    client = new TestClient(running.envoy.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await running?.envoy.stop();
    await running?.service.close(0);
    await closeWorkers(workers);
    rmSync(dir, { recursive: true, force: true });
  });

  test('side calls carry the client trace id with our span as parent; the decode request descends from the decode step', async () => {
    const res = await client.post('/v1/chat/completions', chatBody(), { headers: { traceparent: TRACEPARENT, tracestate: 'k=v' } });
    expect(res.status).toBe(200);
    await running!.service.close(0); // flushes the span processor
    const spans = exporter.getFinishedSpans();
    const spanIds = new Map(spans.map((s) => [s.spanContext().spanId, s.name]));

    const prefill = workers!.prefill.requests[0]!.headers;
    const render = workers!.render.requests[0]!.headers;
    const decode = workers!.decode.requests[0]!.headers;
    for (const h of [prefill, render, decode]) {
      const [, traceId, parent] = h['traceparent']!.split('-');
      expect(traceId).toBe(TRACE_ID);
      expect(spanIds.has(parent!)).toBe(true);
      expect(h['tracestate']).toBe('k=v');
    }
    expect(spanIds.get(prefill['traceparent']!.split('-')[2]!)).toBe('POST prefill');
    expect(spanIds.get(render['traceparent']!.split('-')[2]!)).toBe('POST render');
    expect(spanIds.get(decode['traceparent']!.split('-')[2]!)).toBe('decode');
    const request = spans.find((s) => s.name === 'POST /v1/chat/completions')!;
    expect(request.parentSpanContext?.spanId).toBe(TRACEPARENT.split('-')[2]);
  });
});

describe('TLS and mTLS between Envoy and the service', () => {
  let dir: string;
  let pki: TestPki;
  let workers: Workers | undefined;
  const toClose: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-ops-tls-'));
    pki = makeTestPki();
    workers = await startWorkers();
  });
  afterAll(async () => {
    for (const c of toClose.reverse()) await c().catch(() => undefined);
    await closeWorkers(workers);
    pki?.remove();
    rmSync(dir, { recursive: true, force: true });
  });

  async function post(url: string): Promise<ClientResponse> {
    const client = new TestClient(url);
    try {
      return await client.post('/v1/chat/completions', chatBody('over tls'), { timeoutMs: 10_000 });
    } finally {
      await client.close();
    }
  }

  test('TLS: Envoy verifies the service certificate and the cascade completes', async () => {
    const r = await startCustom(
      join(dir, 'tls'),
      workers!,
      { server: { tls_cert_file: pki.serverCert, tls_key_file: pki.serverKey } },
      {},
      { caFile: pki.caCert },
    );
    toClose.push(
      () => r.service.close(0),
      () => r.envoy.stop(),
    );
    const res = await post(r.envoy.publicUrl);
    expect(res.status).toBe(200);
    expect(res.headers['x-inference-pod']).toBe('sim-decode-0');
    const stats = await r.envoy.stats('cluster.epd_coordinator.ssl.handshake');
    expect(stats['cluster.epd_coordinator.ssl.handshake']).toBeGreaterThanOrEqual(1);
  });

  test('mTLS: Envoy with its client certificate gets through; without one the handshake is refused', async () => {
    const r = await startCustom(
      join(dir, 'mtls'),
      workers!,
      { server: { tls_cert_file: pki.serverCert, tls_key_file: pki.serverKey, tls_client_ca_file: pki.caCert } },
      {},
      { caFile: pki.caCert, certFile: pki.clientCert, keyFile: pki.clientKey },
    );
    toClose.push(
      () => r.service.close(0),
      () => r.envoy.stop(),
    );
    const ok = await post(r.envoy.publicUrl);
    expect(ok.status).toBe(200);
    expect(ok.headers['x-inference-pod']).toBe('sim-decode-0');

    // A second Envoy pointed at the same service, trusting it but presenting no certificate.
    workers!.prefill.clear();
    const anonymous = await envoyFor(join(dir, 'mtls-anonymous'), workers!, r.service.grpcPort, await freePort(), { caFile: pki.caCert });
    toClose.push(() => anonymous.stop());
    const refused = await post(anonymous.publicUrl);
    expect(refused.status).toBe(500); // failure_mode_allow: false -> Envoy fails the request
    expect(workers!.prefill.requests).toHaveLength(0);
    const stats = await anonymous.stats('cluster.epd_coordinator.');
    expect(stats['cluster.epd_coordinator.ssl.handshake'] ?? 0).toBe(0);
    // The service closed the connection during the handshake: Envoy counts a connection error.
    const failures =
      (stats['cluster.epd_coordinator.ssl.connection_error'] ?? 0) + (stats['cluster.epd_coordinator.upstream_cx_connect_fail'] ?? 0);
    expect(failures).toBeGreaterThanOrEqual(1);
  });
});

describe('SIGTERM on the real process behind Envoy', () => {
  let dir: string;
  let workers: Workers | undefined;
  const children = new Set<ChildProcess>();
  const envoys: EnvoyHandle[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-ops-drain-'));
    workers = await startWorkers();
  });
  afterAll(async () => {
    for (const e of envoys) await e.stop().catch(() => undefined);
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await closeWorkers(workers);
    if (!process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  });

  interface Running {
    readonly child: ChildProcess;
    readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
    readonly grpcPort: number;
    readonly metricsPort: number;
    readonly envoy: EnvoyHandle;
    readonly logPath: string;
  }

  /** `node src/main.ts --config <file>` (tsx loader), then an Envoy in front of it. */
  async function startProcess(name: string, shutdownTimeout: string): Promise<Running> {
    const [grpcPort, metricsPort, gatewayPort] = [await freePort(), await freePort(), await freePort()];
    const doc = stackConfigDoc({}, { gateway: `http://127.0.0.1:${gatewayPort}`, render: workers!.render.url });
    const file = join(dir, `${name}.yaml`);
    writeFileSync(
      file,
      yaml.dump({
        ...doc,
        server: {
          ...(doc['server'] as object),
          listen_addr: `127.0.0.1:${grpcPort}`,
          metrics_addr: `127.0.0.1:${metricsPort}`,
          shutdown_timeout: shutdownTimeout,
        },
        pipeline: { ...(doc['pipeline'] as object), steps: defaultSteps({ render: workers!.render.url }) },
      }),
    );
    const logPath = join(dir, `${name}.log`);
    const fd = openSync(logPath, 'w');
    // One process (no npx / tsx wrapper in between), so the signal reaches the service itself.
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', '--config', file], {
      cwd: REPO_ROOT,
      stdio: ['ignore', fd, fd],
    });
    closeSync(fd);
    children.add(child);
    const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => resolve({ code, signal })),
    );
    const probe = new HealthProbe(`127.0.0.1:${grpcPort}`);
    try {
      await waitUntil(
        async () => {
          if (child.exitCode !== null) throw new Error(`service exited during start-up:\n${readFileSync(logPath, 'utf8')}`);
          return (await probe.check(EXT_PROC, 500).catch(() => undefined)) === 'SERVING';
        },
        'the service to report SERVING',
        30_000,
        100,
      );
    } finally {
      probe.close();
    }
    const envoy = await envoyFor(join(dir, `${name}-envoy`), workers!, grpcPort, gatewayPort);
    envoys.push(envoy);
    return { child, exit, grpcPort, metricsPort, envoy, logPath };
  }

  test('first SIGTERM: NOT_SERVING, streams that started finish (0 errors), new ones are refused, exit 0', async () => {
    const svc = await startProcess('drain', '20s');
    const client = new TestClient(svc.envoy.publicUrl);
    const health = new HealthProbe(`127.0.0.1:${svc.grpcPort}`);
    try {
      expect(await health.check(EXT_PROC)).toBe('SERVING');
      workers!.prefill.clear();
      // Hold every request in prefill so that all of them are in the pipeline when the signal comes.
      workers!.prefill.setFaults([{ delayMs: 1500 }]);
      const n = 12;
      const inflight = Array.from({ length: n }, (_, i) =>
        client.post('/v1/chat/completions', chatBody(`in flight ${i}`), { timeoutMs: 20_000 }),
      );
      await workers!.prefill.waitForRequests(n, 10_000);
      const metrics = await scrape(svc.metricsPort);
      expect(sample(metrics, 'epd_coordinator_extproc_active_streams')).toBe(n);

      svc.child.kill('SIGTERM');
      await waitUntil(
        async () => (await health.check(EXT_PROC).catch(() => 'gone')) === 'NOT_SERVING',
        'NOT_SERVING during the drain',
        5000,
        20,
      );
      expect(await health.check('')).toBe('NOT_SERVING');
      // A stream that starts now is refused (Envoy fails the request; failure_mode_allow is false).
      const late = await client.post('/v1/chat/completions', chatBody('after the signal'), { timeoutMs: 10_000 });
      expect(late.status).toBe(500);

      const results = await Promise.all(inflight);
      expect(results.map((r) => r.status)).toEqual(Array(n).fill(200));
      for (const [i, r] of results.entries()) expect(r.text).toContain(`in flight ${i}`);
      expect(await svc.exit).toEqual({ code: 0, signal: null });
      const log = readFileSync(svc.logPath, 'utf8');
      expect(log).toMatch(/"msg":"draining"/);
      expect(log).toMatch(/"msg":"stopped"/);
    } finally {
      workers!.prefill.setFaults([]);
      health.close();
      await client.close();
    }
  });

  test('a second SIGTERM exits at once, without waiting for the drain timeout', async () => {
    const svc = await startProcess('twice', '120s');
    const client = new TestClient(svc.envoy.publicUrl);
    try {
      workers!.prefill.clear();
      workers!.prefill.setFaults([{ hang: true }]);
      const stuck = client.post('/v1/chat/completions', chatBody('never answered'), { timeoutMs: 20_000 }).catch((err: Error) => err);
      await workers!.prefill.waitForRequests(1, 10_000);
      svc.child.kill('SIGTERM');
      const health = new HealthProbe(`127.0.0.1:${svc.grpcPort}`);
      await waitUntil(async () => (await health.check(EXT_PROC).catch(() => 'gone')) === 'NOT_SERVING', 'NOT_SERVING', 5000, 20);
      health.close();
      svc.child.kill('SIGTERM');
      // The drain timeout is 120 s: only the second signal can end the process within the test.
      expect(await svc.exit).toEqual({ code: 1, signal: null });
      const res = await stuck;
      expect(res instanceof Error ? 'error' : res.status).not.toBe(200);
    } finally {
      workers!.prefill.setFaults([]);
      await client.close();
    }
  });
});
