/**
 * Process faults under load (issue #8):
 * - the service killed with SIGKILL: only the requests in flight (and those sent while it is down)
 *   fail; once it is back, Envoy's traffic succeeds again within 2 s;
 * - Envoy restarted: the service keeps serving, and nothing is left in flight.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { REPO_ROOT } from '../../launch/envoy-bootstrap';
import { startChild, type Child } from '../../launch/supervise';
import { startSimulator, type Simulator } from '../../sim/simulator';
import { startEnvoy, type EnvoyHandle } from '../../launch/envoy';
import { freePort, sleep } from '../../launch/ports';
import { startStack, type Stack } from '../support/stack';
import { expectIdle, trackUnhandledRejections } from './support/expect';
import { startLoad, type Outcome } from './support/load';

const chat = (i: number) => ({
  path: '/v1/chat/completions',
  body: { model: 'sim-model', messages: [{ role: 'user', content: `request number ${i} under load` }], max_tokens: 4 },
});

function summary(outcomes: readonly Outcome[]): string {
  const by = new Map<string, number>();
  for (const o of outcomes) by.set(String(o.status), (by.get(String(o.status)) ?? 0) + 1);
  return JSON.stringify(Object.fromEntries(by));
}

describe('the service killed with SIGKILL under load', () => {
  const dir = mkdtempSync(join(tmpdir(), 'epd-sigkill-'));
  const sims: Simulator[] = [];
  let envoy: EnvoyHandle | undefined;
  let service: Child | undefined;
  let configPath = '';

  const startServiceProcess = (n: number): Promise<Child> =>
    startChild({
      name: `epd-coordinator-${n}`,
      command: process.execPath,
      args: ['--import', 'tsx', join(REPO_ROOT, 'src/main.ts'), '--config', configPath],
      cwd: REPO_ROOT,
      logPath: join(dir, `coordinator-${n}.log`),
      ready: /"msg":"epd-coordinator listening"/,
    });

  beforeAll(async () => {
    for (const role of ['render', 'encode', 'prefill', 'decode'] as const) {
      sims.push(await startSimulator({ name: `sim-${role}-0`, role, interTokenLatencyMs: 5 }));
    }
    const [render, encode, prefill, decode] = sims as [Simulator, Simulator, Simulator, Simulator];
    const gatewayPort = await freePort();
    const extProcPort = await freePort();
    configPath = join(dir, 'coordinator.yaml');
    writeFileSync(
      configPath,
      yaml.dump({
        log_level: 2,
        server: { listen_addr: `127.0.0.1:${extProcPort}`, metrics_addr: '127.0.0.1:0', shutdown_timeout: '1s' },
        gateway: { address: `http://127.0.0.1:${gatewayPort}`, timeout: '5s' },
        pipeline: { steps: [{ type: 'render', params: { address: render.url } }, { type: 'prefill' }, { type: 'decode' }] },
      }),
    );
    service = await startServiceProcess(1);
    envoy = await startEnvoy({
      dir: join(dir, 'envoy'),
      bootstrap: {
        gatewayPort,
        extProcAddress: `127.0.0.1:${extProcPort}`,
        encodeAddress: `127.0.0.1:${encode.port}`,
        prefillAddress: `127.0.0.1:${prefill.port}`,
        decodeAddress: `127.0.0.1:${decode.port}`,
      },
    });
  }, 60_000);

  afterAll(async () => {
    await envoy?.stop();
    await service?.stop(2000);
    await Promise.all(sims.map((s) => s.close()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('only in-flight requests fail, and traffic succeeds again within 2 s of the restart', async () => {
    const load = startLoad(envoy!.publicUrl, { concurrency: 6, body: chat, timeoutMs: 5000 });
    await sleep(800);
    const killedAt = performance.now();
    process.kill(service!.pid, 'SIGKILL');
    await service!.exited;
    service = await startServiceProcess(2);
    const readyAt = performance.now();
    await sleep(3000);
    const outcomes = await load.stop();
    const context = `outcomes ${summary(outcomes)}; down for ${Math.round(readyAt - killedAt)} ms`;

    // Everything that finished before the kill succeeded.
    const before = outcomes.filter((o) => o.end < killedAt);
    expect({ context, failed: before.filter((o) => o.status !== 200).length }).toEqual({ context, failed: 0 });
    expect(before.length).toBeGreaterThan(5);

    // Failures are requests in flight at the kill or sent while the service was down (or coming back).
    const recovery = outcomes.filter((o) => o.start >= readyAt && o.status === 200).sort((a, b) => a.end - b.end)[0];
    expect(recovery).toBeDefined();
    const recoveredIn = recovery!.end - readyAt;
    expect({ context, recoveredIn: recoveredIn < 2000 }).toEqual({ context, recoveredIn: true });
    for (const o of outcomes.filter((x) => x.status !== 200)) {
      const inFlightAtKill = o.start <= killedAt && o.end >= killedAt;
      const sentWhileDown = o.start >= killedAt && o.start <= recovery!.end;
      expect({ context, o, explained: inFlightAtKill || sentWhileDown }).toEqual({ context, o, explained: true });
    }

    // After the recovery point every request succeeds.
    const after = outcomes.filter((o) => o.start > recovery!.end);
    expect(after.length).toBeGreaterThan(10);
    expect(after.every((o) => o.status === 200)).toBe(true);
  }, 60_000);
});

describe('Envoy restarted under load', () => {
  let stack: Stack;
  let envoy: EnvoyHandle | undefined;
  let rejections: ReturnType<typeof trackUnhandledRejections>;

  beforeAll(async () => {
    rejections = trackUnhandledRejections();
    stack = await startStack({ simulator: { interTokenLatencyMs: 5 } });
  });
  afterAll(async () => {
    await envoy?.stop();
    await stack?.close();
    rejections?.dispose();
  });

  it('the service keeps serving, and ends with nothing in flight', async () => {
    const old = stack.envoy;
    const load = startLoad(old.publicUrl, { concurrency: 6, body: chat, timeoutMs: 5000 });
    await sleep(600);
    await old.stop();
    const s = stack.sims;
    envoy = await startEnvoy({
      dir: join(stack.dir, 'envoy-2'),
      bootstrap: {
        publicPort: old.publicPort,
        gatewayPort: old.gatewayPort,
        extProcAddress: `127.0.0.1:${stack.service.grpcPort}`,
        encodeAddress: `127.0.0.1:${s.encode.port}`,
        prefillAddress: `127.0.0.1:${s.prefill.port}`,
        decodeAddress: `127.0.0.1:${s.decode.port}`,
      },
    });
    const readyAt = performance.now();
    await sleep(1500);
    const outcomes = await load.stop();
    const after = outcomes.filter((o) => o.start > readyAt);
    expect(after.length).toBeGreaterThan(10);
    expect({ outcomes: summary(after) }).toEqual({ outcomes: JSON.stringify({ '200': after.length }) });
    await expectIdle(stack.service);
    expect(rejections.seen).toEqual([]);
  }, 60_000);
});
