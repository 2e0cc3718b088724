/**
 * Issue 20 item 4: `server.workers: 2` behind the real Envoy. The real process (`node src/main.ts`):
 * a cluster primary and two workers on one port, Envoy's service cluster capped at a few streams
 * per connection (launch/envoy-policy.ts) so that it opens enough connections for both.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { REPO_ROOT } from '../../launch/envoy-bootstrap';
import { startSimulator, type Simulator } from '../../sim/simulator';
import { TestClient } from '../../launch/client';
import { httpGet, startEnvoy, type EnvoyHandle } from '../../launch/envoy';
import { freePort, waitUntil } from '../../launch/ports';
import { defaultSteps, stackConfigDoc } from '../support/stack';
import { sample, samples, scrape } from '../support/metrics-text';
import { HealthProbe } from '../unit/observability/health-client';

const EXT_PROC = 'envoy.service.ext_proc.v3.ExternalProcessor';
const chatBody = (content: string) => ({ model: 'sim-model', messages: [{ role: 'user', content }], max_tokens: 20 });

/** The worker processes the primary forked (Linux: the children of its main thread). */
function childPids(pid: number): number[] {
  const text = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
  return text === '' ? [] : text.split(/\s+/).map(Number);
}

const count = (text: string, re: RegExp) => text.split('\n').filter((l) => re.test(l)).length;

describe('server.workers: 2 behind Envoy', () => {
  let dir: string;
  let sims: Record<'render' | 'encode' | 'prefill' | 'decode', Simulator>;
  let child: ChildProcess;
  let exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  let envoy: EnvoyHandle;
  let client: TestClient;
  let grpcPort: number;
  let metricsPort: number;
  let logPath: string;
  const log = () => readFileSync(logPath, 'utf8');

  /** `n` chat requests, `lanes` at a time; the statuses in order of sending. */
  async function load(n: number, lanes: number, tag: string): Promise<number[]> {
    const statuses: number[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: lanes }, async () => {
        while (next < n) {
          const i = next++;
          const res = await client.post('/v1/chat/completions', chatBody(`${tag} ${i}`), { timeoutMs: 20_000 });
          statuses[i] = res.status;
        }
      }),
    );
    return statuses;
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-workers-'));
    const started = await Promise.all(
      (['render', 'encode', 'prefill', 'decode'] as const).map((role) => startSimulator({ name: `sim-${role}-0`, role, port: 0 })),
    );
    sims = { render: started[0]!, encode: started[1]!, prefill: started[2]!, decode: started[3]! };
    [grpcPort, metricsPort] = [await freePort(), await freePort()];
    const gatewayPort = await freePort();
    const doc = stackConfigDoc({}, { gateway: `http://127.0.0.1:${gatewayPort}`, render: sims.render.url });
    const file = join(dir, 'coordinator.yaml');
    const server = { ...(doc['server'] as object), listen_addr: `127.0.0.1:${grpcPort}`, metrics_addr: `127.0.0.1:${metricsPort}` };
    writeFileSync(
      file,
      yaml.dump({
        ...doc,
        server: { ...server, workers: 2, shutdown_timeout: '20s' },
        pipeline: { ...(doc['pipeline'] as object), steps: defaultSteps({ render: sims.render.url }) },
      }),
    );
    logPath = join(dir, 'coordinator.log');
    const fd = openSync(logPath, 'w');
    child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', '--config', file], { cwd: REPO_ROOT, stdio: ['ignore', fd, fd] });
    closeSync(fd);
    exit = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    await waitUntil(
      async () => {
        if (child.exitCode !== null) throw new Error(`the primary exited during start-up:\n${log()}`);
        return log().includes('"msg":"all workers listening"');
      },
      'both workers to listen',
      60_000,
      100,
    );
    envoy = await startEnvoy({
      dir: join(dir, 'envoy'),
      bootstrap: {
        bodyMode: 'full_duplex',
        gatewayPort,
        extProcAddress: `127.0.0.1:${grpcPort}`,
        encodeAddress: `127.0.0.1:${sims.encode.port}`,
        prefillAddress: `127.0.0.1:${sims.prefill.port}`,
        decodeAddress: `127.0.0.1:${sims.decode.port}`,
        extProcWorkers: 2,
        // Rotated often, so that a restarted worker gets connections back within a test's traffic.
        extProcStreamCap: 20,
      },
    });
    client = new TestClient(envoy.publicUrl);
  }, 90_000);

  afterAll(async () => {
    await client?.close();
    await envoy?.stop().catch(() => undefined);
    if (child && child.exitCode === null && child.signalCode === null) {
      for (const pid of childPids(child.pid!)) process.kill(pid, 'SIGKILL');
      child.kill('SIGKILL');
    }
    await Promise.all(Object.values(sims ?? {}).map((s) => s.close().catch(() => undefined)));
    if (!process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  });

  test('load spreads over both worker processes, and /metrics sums them', async () => {
    const workers = childPids(child.pid!);
    expect(workers).toHaveLength(2);
    const n = 48;
    expect(await load(n, 16, 'spread')).toEqual(Array(n).fill(200));

    const text = await scrape(metricsPort);
    const perWorker = samples(text, 'epd_coordinator_worker_streams_total');
    expect([...perWorker.keys()].sort()).toEqual(['{worker="0"}', '{worker="1"}']);
    for (const streams of perWorker.values()) expect(streams).toBeGreaterThan(0);
    expect([...perWorker.values()].reduce((a, b) => a + b, 0)).toBe(n);
    // Counters and histograms are the sum over the workers; readiness is the minimum (1: both ready).
    expect(sample(text, 'llm_d_coordinator_request_total', 'model_name="sim-model"')).toBe(n);
    expect(sample(text, 'epd_coordinator_extproc_stream_duration_seconds_count')).toBe(n);
    expect(sample(text, 'epd_coordinator_extproc_stream_duration_seconds_bucket', 'le="+Inf"')).toBe(n);
    expect(sample(text, 'llm_d_coordinator_request_duration_seconds_count', 'model_name="sim-model"')).toBe(n);
    expect(sample(text, 'epd_coordinator_ready')).toBe(1);
    expect(sample(text, 'epd_coordinator_workers')).toBe(2);
    // prom-client's own figures that do not add up: the pod's start (prom-client would omit it), one fd limit.
    expect(sample(text, 'process_start_time_seconds')).toBeLessThanOrEqual(Date.now() / 1000);
    const fdLimit = Number(/^Max open files\s+(\d+)/m.exec(readFileSync(`/proc/${child.pid}/limits`, 'utf8'))?.[1]);
    expect(sample(text, 'process_max_fds')).toBe(fdLimit);
    // Envoy opened more than one connection to the one port: that is what lets both workers in.
    const stats = await httpGet(`${envoy.adminUrl}/stats?filter=^cluster\\.epd_coordinator\\.upstream_cx_active$`, 2000);
    expect(Number(/upstream_cx_active: (\d+)/.exec(stats.body)?.[1])).toBeGreaterThanOrEqual(2);
  });

  test('a worker that dies is restarted (logged, counted); traffic continues and reaches the new worker', async () => {
    const [victim, survivor] = childPids(child.pid!);
    process.kill(victim!, 'SIGKILL');
    await waitUntil(
      async () => count(log(), /"msg":"worker listening"/) === 3 && childPids(child.pid!).length === 2,
      'the replacement worker to listen',
      30_000,
      100,
    );
    const now = childPids(child.pid!);
    expect(now).toContain(survivor);
    expect(now).not.toContain(victim);
    expect(log()).toMatch(
      new RegExp(`"worker_pid":${victim},"code":null,"signal":"SIGKILL","msg":"worker died unexpectedly: restarting it"`),
    );
    const text = await scrape(metricsPort);
    expect(sample(text, 'epd_coordinator_worker_restarts_total')).toBe(1);
    expect(sample(text, 'epd_coordinator_workers')).toBe(2);
    // Envoy reconnected to the survivor while the new worker started; as connections rotate
    // (max_requests_per_connection), the primary deals new ones to the new worker too.
    const before = samples(text, 'epd_coordinator_worker_streams_total');
    expect(await load(96, 8, 'after restart')).toEqual(Array(96).fill(200));
    const after = samples(await scrape(metricsPort), 'epd_coordinator_worker_streams_total');
    for (const w of ['{worker="0"}', '{worker="1"}']) expect(after.get(w)! - (before.get(w) ?? 0)).toBeGreaterThan(0);
  });

  test('SIGTERM on the primary drains both workers: in-flight requests finish, new streams are refused, exit 0', async () => {
    const workers = childPids(child.pid!);
    const health = new HealthProbe(`127.0.0.1:${grpcPort}`);
    try {
      const before = samples(await scrape(metricsPort), 'epd_coordinator_worker_streams_total');
      sims.prefill.clear();
      // Held in prefill, so every request is inside a worker's pipeline when the signal comes.
      sims.prefill.setFaults([{ delayMs: 1500 }]);
      const n = 12;
      const inflight = Array.from({ length: n }, (_, i) =>
        client.post('/v1/chat/completions', chatBody(`in flight ${i}`), { timeoutMs: 20_000 }),
      );
      await sims.prefill.waitForRequests(n, 10_000);
      const text = await scrape(metricsPort);
      expect(sample(text, 'epd_coordinator_extproc_active_streams')).toBe(n);
      // Both workers hold some of them: the drain below is each worker's own.
      const during = samples(text, 'epd_coordinator_worker_streams_total');
      for (const w of ['{worker="0"}', '{worker="1"}']) expect(during.get(w)! - (before.get(w) ?? 0)).toBeGreaterThan(0);

      child.kill('SIGTERM');
      await waitUntil(async () => (await health.check(EXT_PROC).catch(() => 'gone')) === 'NOT_SERVING', 'NOT_SERVING', 5000, 20);
      await waitUntil(async () => count(log(), /"msg":"draining"/) === 2, 'both workers to drain', 5000, 20);
      const late = await client.post('/v1/chat/completions', chatBody('after the signal'), { timeoutMs: 10_000 });
      expect(late.status).toBe(500);

      const results = await Promise.all(inflight);
      expect(results.map((r) => r.status)).toEqual(Array(n).fill(200));
      for (const [i, r] of results.entries()) expect(r.text).toContain(`in flight ${i}`);
      expect(await exit).toEqual({ code: 0, signal: null });
      expect(log()).toMatch(/"msg":"stopped: every worker has exited"/);
      expect(count(log(), /"msg":"stopped"/)).toBe(2);
      for (const pid of workers) expect(existsSync(`/proc/${pid}`)).toBe(false);
    } finally {
      sims.prefill.setFaults([]);
      health.close();
    }
  });
});

/** The primary alone (no Envoy): what it does when workers cannot be kept running. */
describe('server.workers: 2, a primary whose workers keep failing', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'epd-workers-fail-'));
  });
  afterAll(() => {
    if (!process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  });

  /** `node src/main.ts` with workers 2 and `server` extras; its log and exit. */
  async function start(name: string, server: Record<string, unknown>) {
    const [grpcPort, metricsPort] = [await freePort(), await freePort()];
    const doc = stackConfigDoc({ steps: () => [] }, { gateway: 'http://127.0.0.1:9', render: 'http://127.0.0.1:9' });
    const file = join(dir, `${name}.yaml`);
    const serverDoc = { ...(doc['server'] as object), listen_addr: `127.0.0.1:${grpcPort}`, metrics_addr: `127.0.0.1:${metricsPort}` };
    writeFileSync(file, yaml.dump({ ...doc, server: { ...serverDoc, workers: 2, ...server } }));
    const logPath = join(dir, `${name}.log`);
    const fd = openSync(logPath, 'w');
    const proc = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', '--config', file], {
      cwd: REPO_ROOT,
      stdio: ['ignore', fd, fd],
    });
    closeSync(fd);
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      proc.once('exit', (code, signal) => resolve({ code, signal })),
    );
    return { proc, exited, log: () => readFileSync(logPath, 'utf8') };
  }

  test('a worker that cannot start stops the pod, as one process would: exit 1', async () => {
    const { exited, log } = await start('bad-cert', { tls_cert_file: join(dir, 'missing.crt'), tls_key_file: join(dir, 'missing.key') });
    expect(await exited).toEqual({ code: 1, signal: null });
    expect(log()).toMatch(/"msg":"a worker exited during start-up: stopping"/);
    // Each worker said why, as a single process does.
    expect(log()).toMatch(/configuration error: server\.tls_cert_file: expected a readable PEM file at .*missing\.crt/);
  }, 60_000);

  test('more than 5 deaths in a minute spend the restart budget: the primary drains the rest and exits 1', async () => {
    const { proc, exited, log } = await start('crash-loop', {});
    try {
      await waitUntil(async () => log().includes('"msg":"all workers listening"'), 'both workers to listen', 60_000, 100);
      for (let kill = 1; kill <= 6; kill++) {
        const [victim] = childPids(proc.pid!);
        process.kill(victim!, 'SIGKILL');
        if (kill === 6) break;
        // The replacement is forked and listening again (2 + kill workers have listened by now).
        await waitUntil(async () => count(log(), /"msg":"worker listening"/) === 2 + kill, `restart ${kill}`, 30_000, 50);
      }
      expect(await exited).toEqual({ code: 1, signal: null });
      expect(count(log(), /"msg":"worker died unexpectedly: restarting it"/)).toBe(5);
      expect(log()).toMatch(/"limit":5,"window_ms":60000,"msg":"workers keep dying: restart budget spent, stopping"/);
    } finally {
      if (proc.exitCode === null) proc.kill('SIGKILL');
    }
  }, 120_000);
});
