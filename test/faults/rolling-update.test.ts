/**
 * Rolling updates with nothing lost (issue 21 item 1). Two coordinator replicas, each its own
 * process and gRPC port, behind one Envoy cluster with the shipped health check (grpc.health.v1 on
 * the readiness service, launch/envoy-policy.ts). Under streaming and non-streaming load, each
 * replica in turn gets SIGTERM and, once it has exited, is started again on its port; twice over.
 *
 * The drain that makes it lossless: on SIGTERM a replica turns NOT_SERVING but keeps accepting
 * streams for `server.drain_delay` (the health check's detection time), by which Envoy has taken
 * it out; then it refuses new streams, lets the open ones finish and exits 0. The restarted replica
 * takes traffic again only once Envoy's check sees it SERVING.
 *
 * Target: not one failed request, and every stream whole (its deltas join to the echoed prompt and
 * `[DONE]` ends it).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { TestClient } from '../../launch/client';
import { REPO_ROOT } from '../../launch/envoy-bootstrap';
import { httpGet } from '../../launch/envoy';
import { DRAIN_DELAY_SECONDS } from '../../launch/envoy-policy';
import { freePort, waitUntil } from '../../launch/ports';
import { startChild, type Child } from '../../launch/supervise';
import { startSimulator, type Simulator } from '../../sim/simulator';
import { stackConfigDoc } from '../support/stack';
import { startCustomEnvoy, withClusterEndpoints, type CustomEnvoy } from './support/custom-envoy';
import { mixedChats, type MixedTally } from './support/load';

const CONCURRENCY = 8;
const ROUNDS = 2;

interface Replica {
  readonly name: string;
  readonly port: number;
  readonly configPath: string;
  child?: Child;
}

describe('rolling update of two coordinator replicas behind one health-checked Envoy cluster', () => {
  let dir: string;
  const sims: Simulator[] = [];
  const replicas: Replica[] = [];
  let envoy: CustomEnvoy | undefined;
  let client: TestClient | undefined;

  const start = async (r: Replica): Promise<void> => {
    r.child = await startChild({
      name: r.name,
      command: process.execPath,
      args: ['--import', 'tsx', join(REPO_ROOT, 'src/main.ts'), '--config', r.configPath],
      cwd: REPO_ROOT,
      logPath: join(dir, `${r.name}.log`),
      ready: /"msg":"epd-coordinator listening"/,
      readyTimeoutMs: 60_000,
    });
  };

  /** Envoy's view of one host of the coordinator cluster, from admin /clusters. */
  const healthy = async (r: Replica): Promise<boolean> => {
    const body = (await httpGet(`${envoy!.adminUrl}/clusters`)).body;
    const flags = new RegExp(`^epd_coordinator::127\\.0\\.0\\.1:${r.port}::health_flags::(\\S+)$`, 'm').exec(body);
    return flags?.[1] === 'healthy';
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-rolling-'));
    for (const role of ['render', 'encode', 'prefill', 'decode'] as const) {
      // Streams take a while (about 10 tokens, 20 ms apart), so replicas are replaced while some are open.
      sims.push(await startSimulator({ name: `sim-${role}-0`, role, port: 0, interTokenLatencyMs: 20 }));
    }
    const [render, encode, prefill, decode] = sims as [Simulator, Simulator, Simulator, Simulator];
    const gatewayPort = await freePort();
    for (const name of ['replica-a', 'replica-b']) {
      const port = await freePort();
      const doc = stackConfigDoc({ logLevel: 2 }, { gateway: `http://127.0.0.1:${gatewayPort}`, render: render.url });
      const server = doc['server'] as Record<string, unknown>;
      Object.assign(server, {
        listen_addr: `127.0.0.1:${port}`,
        metrics_addr: 'off',
        drain_delay: `${DRAIN_DELAY_SECONDS}s`,
        shutdown_timeout: '10s',
      });
      const configPath = join(dir, `${name}.yaml`);
      writeFileSync(configPath, yaml.dump(doc));
      replicas.push({ name, port, configPath });
    }
    await Promise.all(replicas.map(start));
    envoy = await startCustomEnvoy(
      join(dir, 'envoy'),
      {
        gatewayPort,
        extProcAddress: `127.0.0.1:${replicas[0]!.port}`,
        encodeAddress: `127.0.0.1:${encode.port}`,
        prefillAddress: `127.0.0.1:${prefill.port}`,
        decodeAddress: `127.0.0.1:${decode.port}`,
      },
      (text) =>
        withClusterEndpoints(
          text,
          'epd_coordinator',
          replicas.map((r) => `127.0.0.1:${r.port}`),
        ),
    );
    client = new TestClient(envoy.publicUrl);
    for (const r of replicas) await waitUntil(() => healthy(r), `${r.name} healthy in Envoy`, 30_000, 100);
  }, 120_000);

  afterAll(async () => {
    await client?.close();
    await envoy?.stop();
    await Promise.all(replicas.map((r) => r.child?.stop(3000)));
    await Promise.all(sims.map((s) => s.close()));
    if (dir && !process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  });

  it(`replaces each replica ${ROUNDS} times under load: 0 failed requests, no stream cut`, async () => {
    let done = false;
    const load: Promise<MixedTally> = mixedChats(client!, { concurrency: CONCURRENCY, stop: () => done });
    const exits: Array<{ replica: string; code: number | null }> = [];
    try {
      await new Promise((r) => setTimeout(r, 1000));
      for (let round = 0; round < ROUNDS; round++) {
        for (const r of replicas) {
          const child = r.child!;
          const exited = child.exited;
          await child.stop(30_000);
          exits.push({ replica: r.name, code: (await exited).code });
          await start(r);
          await waitUntil(() => healthy(r), `${r.name} healthy again`, 30_000, 100);
        }
      }
      await new Promise((r) => setTimeout(r, 1000));
    } finally {
      done = true;
    }
    const tally = await load;
    process.stdout.write(
      `rolling update: ${tally.sent} requests sent (half streamed), ${tally.failed} failed, ${tally.cut} streams cut, over ${exits.length} replacements\n`,
    );
    // Every replica drained and exited 0 (no kill at the grace period).
    const expected = Array.from({ length: ROUNDS }, () => replicas.map((r) => ({ replica: r.name, code: 0 }))).flat();
    expect(exits).toEqual(expected);
    expect(tally.sent).toBeGreaterThan(100);
    expect({ failed: tally.failed, cut: tally.cut, failures: tally.failures }).toEqual({ failed: 0, cut: 0, failures: [] });
  }, 150_000);
});
