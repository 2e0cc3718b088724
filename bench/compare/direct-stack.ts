/**
 * The `direct` compare topology (the bench's first one), on loopback:
 * - floor: client -> Envoy gateway listener (epp-profile: decode) -> decode worker
 * - ours:  client -> Envoy public listener -> epd-coordinator ext_proc (render direct, prefill via the
 *          gateway listener) -> decode worker
 * - go:    client -> the Go `coordinator` (render direct, prefill and decode via the gateway
 *          listener; it proxies the decode answer itself). No Envoy in front of it.
 * - node:  client -> a second Envoy's public listener -> the bare Node coordinator
 *          (bare-coordinator.ts: the same legs as ours, via that Envoy's gateway listener) -> decode
 *          worker: the floor of any coordinator written in Node.
 * Workers are one `llm-d-inference-sim` per role (or our sim/ with `ownSims`), header-routed by the
 * gateway listener of envoy/'s bootstrap: no EPP. Pipeline on all three: render -> prefill -> decode, kv-nixl.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../../launch/envoy-bootstrap';
import { coordinatorConfig } from '../../launch/local-stack';
import { startChild } from '../../launch/supervise';
import { startEnvoy, type EnvoyHandle } from '../../launch/envoy';
import { freePort } from '../../launch/ports';
import { startBareCoordinator } from './node-floor';
import { childProc, startPolled, type Proc } from './procs';
import { goCoordinatorConfig, simLatencyArgs, type CompareStack, type Phase, type StackArgs } from './stack';

const MODEL = 'sim-model';

export async function startDirectStack(
  phase: Phase,
  args: StackArgs & { bodyMode: 'full_duplex' | 'buffered' },
  say: (m: string) => void,
): Promise<CompareStack> {
  const dir = join(REPO_ROOT, '.cache', 'bench-compare', `direct-${phase}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const procs: Proc[] = [];
  let envoy: EnvoyHandle | undefined;
  let nodeEnvoy: EnvoyHandle | undefined;
  const stop = async () => {
    await nodeEnvoy?.stop();
    await envoy?.stop();
    for (const p of [...procs].reverse()) await p.stop();
  };
  try {
    const port = {
      render: await freePort(),
      prefill: await freePort(),
      decode: await freePort(),
      extProc: await freePort(),
      metrics: await freePort(),
      go: await freePort(),
      node: await freePort(),
    };
    const peers = process.env['PEERS_BIN'] ?? '';
    for (const role of ['render', 'prefill', 'decode'] as const) {
      const name = `sim-${role}-0`;
      if (args.ownSims) {
        const lat = phase === 'realistic' && role !== 'render' ? ['--time-to-first-token-ms', '20', '--inter-token-latency-ms', '5'] : [];
        const entry = join(REPO_ROOT, 'sim', 'cli.ts');
        const simArgs = ['--port', String(port[role]), '--name', name, '--role', role, '--mode', 'echo', ...lat];
        const c = await startChild({
          name,
          command: process.execPath,
          args: ['--import', 'tsx', entry, ...simArgs],
          cwd: REPO_ROOT,
          logPath: join(dir, `${name}.log`),
          ready: /^sim \S+ listening on /,
        });
        procs.push(childProc(c));
      } else {
        const simArgs = [
          `--model=${MODEL}`,
          `--port=${port[role]}`,
          '--force-dummy-tokenizer',
          '--max-model-len=131072',
          '--max-request-body-size-mb=64',
          '--max-num-seqs=1000',
          ...(role === 'prefill' ? [] : ['--mode=echo']),
          ...(role === 'render' ? [] : simLatencyArgs(phase)),
        ];
        const health = `http://127.0.0.1:${port[role]}/health`;
        const env = { GOMAXPROCS: '1', POD_NAME: name };
        procs.push(await startPolled(name, join(peers, 'llm-d-inference-sim'), simArgs, join(dir, `${name}.log`), health, env));
      }
      say(`direct/${phase}: ${name} on 127.0.0.1:${port[role]}`);
    }

    // Envoy first (its gateway port is in both coordinators' configs); its ext_proc cluster finds our
    // service once it listens. The node setup gets an Envoy of its own, so that each Envoy's CPU is
    // one setup's, without the ext_proc health check: the bare coordinator has no health service.
    const startEnvoyFor = (name: string, extProcPort: number, healthCheck: boolean) =>
      startEnvoy({
        dir: join(dir, name),
        logLevel: 'warn',
        detached: true,
        flushIntervalMs: 1000,
        bootstrap: {
          bodyMode: args.bodyMode,
          extProcAddress: `127.0.0.1:${extProcPort}`,
          encodeAddress: `127.0.0.1:${port.prefill}`,
          prefillAddress: `127.0.0.1:${port.prefill}`,
          decodeAddress: `127.0.0.1:${port.decode}`,
          accessLogPath: join(dir, `${name}-access.log`),
          extProcHealthCheck: healthCheck,
        },
      });
    envoy = await startEnvoyFor('envoy', port.extProc, true);
    nodeEnvoy = await startEnvoyFor('envoy-node', port.node, false);
    const gateway = envoy.gatewayPort;
    const oursConfig = join(dir, 'coordinator.yaml');
    const ports = { public: envoy.publicPort, gateway, admin: 0, async: 0, encode: port.prefill, ...port };
    writeFileSync(oursConfig, coordinatorConfig({ ports, kvConnector: 'kv-nixl', logLevel: 2 }));
    const profile = args.cpuProfileDir ? ['--cpu-prof', `--cpu-prof-dir=${join(args.cpuProfileDir, `direct-${phase}`)}`] : [];
    const ours = await startChild({
      name: 'epd-coordinator',
      command: args.serviceNode,
      args: [...args.serviceNodeFlags, ...profile, join(REPO_ROOT, 'dist', 'src', 'main.js'), '--config', oursConfig],
      env: { ...process.env, ...args.serviceEnv },
      cwd: REPO_ROOT,
      logPath: join(dir, 'coordinator.log'),
      ready: /"msg":"epd-coordinator listening"/,
    });
    procs.push(childProc(ours));
    const version = execFileSync(args.serviceNode, ['--version'], { encoding: 'utf8' }).trim();
    say(`direct/${phase}: epd-coordinator (node ${version} ${args.serviceNodeFlags.join(' ')}) pid ${ours.pid}`);

    const goConfig = join(dir, 'go-coordinator.yaml');
    writeFileSync(goConfig, goCoordinatorConfig({ port: port.go, gatewayPort: gateway, renderPort: port.render, multimodal: false }));
    const go = await startPolled(
      'go-coordinator',
      join(peers, 'coordinator'),
      ['--config', goConfig],
      join(dir, 'go-coordinator.log'),
      `http://127.0.0.1:${port.go}/healthz`,
    );
    procs.push(go);
    say(`direct/${phase}: Go coordinator pid ${go.pid} on 127.0.0.1:${port.go}`);

    const node = await startBareCoordinator({
      dir,
      port: port.node,
      renderUrl: `http://127.0.0.1:${port.render}`,
      gatewayUrl: nodeEnvoy.gatewayUrl,
      args,
      ...(args.cpuProfileDir ? { profileDir: join(args.cpuProfileDir, `direct-${phase}-node`) } : {}),
    });
    procs.push(node);
    say(`direct/${phase}: bare Node coordinator pid ${node.pid}, behind Envoy pid ${nodeEnvoy.pid}`);
    return {
      topology: 'direct',
      model: MODEL,
      setups: ['floor', 'ours', 'go', 'node'],
      urls: { floor: envoy.gatewayUrl, ours: envoy.publicUrl, go: `http://127.0.0.1:${port.go}`, node: nodeEnvoy.publicUrl },
      floorHeaders: { 'epp-profile': 'decode' },
      pids: { ours: ours.pid, go: go.pid, envoy: envoy.pid, node: node.pid, nodeEnvoy: nodeEnvoy.pid },
      oursMetricsUrl: `http://127.0.0.1:${port.metrics}/metrics`,
      adminUrl: envoy.adminUrl,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
