/**
 * The `deploy` compare topology: where users deploy both (launch/epp-stack.ts, the no-Kubernetes
 * production topology), on loopback, one Envoy, the real llm-d EPP on the gateway listener for both:
 * - floor: client -> Envoy gateway listener (epp-profile: decode) -> EPP -> decode worker
 * - ours:  client -> Envoy public listener -> epd-coordinator ext_proc -> EPP -> decode worker (its
 *          side calls re-enter the gateway listener, EPP and all)
 * - go:    client -> Envoy `go` listener (a plain route: the same front door) -> the Go `coordinator`
 *          -> the gateway listener (EPP) for prefill and decode; it proxies the decode answer.
 * - node:  client -> a second Envoy, the same production config, with the bare Node coordinator as
 *          its ext_proc (node-floor.ts) -> the same EPP -> decode worker; its prefill re-enters that
 *          Envoy's gateway listener: the floor of any coordinator written in Node, where users deploy.
 * Same pipeline on both: replace-media-urls, render, encode, prefill, decode; kv-nixl, ec-nixl.
 */
import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../../launch/envoy-bootstrap';
import { EPP_STACK_MODEL, freeEppStackPorts, startEppStack } from '../../launch/epp-stack';
import { freePort } from '../../launch/ports';
import { startDeployNodeFloor, type DeployNodeFloor } from './node-floor';
import { startPolled, type Proc } from './procs';
import { goCoordinatorConfig, simLatencyArgs, type CompareStack, type Phase, type StackArgs } from './stack';

export async function startDeployStack(phase: Phase, args: StackArgs, say: (m: string) => void): Promise<CompareStack> {
  const peers = process.env['PEERS_BIN'] ?? '';
  const dir = join(REPO_ROOT, '.cache', 'bench-compare', `deploy-${phase}`);
  rmSync(dir, { recursive: true, force: true });
  const ports = await freeEppStackPorts(['encode', 'prefill', 'decode']);
  const goPort = await freePort();
  const goFront = await freePort();
  const profile = args.cpuProfileDir ? ['--cpu-prof', `--cpu-prof-dir=${join(args.cpuProfileDir, `deploy-${phase}`)}`] : [];
  const stack = await startEppStack({
    dir,
    ports,
    eppBin: join(peers, 'epp'),
    simBin: join(peers, 'llm-d-inference-sim'),
    simArgs: ['--max-num-seqs=1000', ...simLatencyArgs(phase)],
    simLogHttp: false,
    conditionalDecode: false,
    serviceCommand: (configPath) => ({
      command: args.serviceNode,
      args: [...args.serviceNodeFlags, ...profile, join(REPO_ROOT, 'dist', 'src', 'main.js'), '--config', configPath],
      env: { ...process.env, ...args.serviceEnv },
    }),
    proxyListeners: [{ name: 'go', port: goFront, address: `127.0.0.1:${goPort}` }],
    say: (m) => say(`deploy/${phase}: ${m}`),
  });
  let go: Proc | undefined;
  let node: DeployNodeFloor | undefined;
  try {
    const goConfig = join(dir, 'go-coordinator.yaml');
    writeFileSync(goConfig, goCoordinatorConfig({ port: goPort, gatewayPort: ports.gateway, renderPort: ports.render, multimodal: true }));
    go = await startPolled(
      'go-coordinator',
      join(peers, 'coordinator'),
      ['--config', goConfig],
      join(dir, 'go-coordinator.log'),
      `http://127.0.0.1:${goPort}/healthz`,
    );
    node = await startDeployNodeFloor({
      dir,
      renderPort: ports.render,
      eppGrpcPort: ports.eppGrpc,
      args,
      ...(args.cpuProfileDir ? { profileDir: join(args.cpuProfileDir, `deploy-${phase}-node`) } : {}),
    });
    say(`deploy/${phase}: bare Node coordinator pid ${node.coordinator.pid}, behind Envoy pid ${node.envoy.pid}`);
    const version = execFileSync(args.serviceNode, ['--version'], { encoding: 'utf8' }).trim();
    say(
      `deploy/${phase}: our service on node ${version} ${args.serviceNodeFlags.join(' ')}; Go coordinator pid ${go.pid} behind Envoy :${goFront}`,
    );
    const pid = (name: string): number => {
      const p = stack.pids.find((x) => x.name === name)?.pid;
      if (!p) throw new Error(`the EPP stack has no ${name}`);
      return p;
    };
    const goProc = go;
    const nodeFloor = node;
    return {
      topology: 'deploy',
      model: EPP_STACK_MODEL,
      setups: ['floor', 'ours', 'go', 'node'],
      urls: { floor: stack.gatewayUrl, ours: stack.publicUrl, go: `http://127.0.0.1:${goFront}`, node: nodeFloor.publicUrl },
      floorHeaders: { 'epp-profile': 'decode' },
      pids: {
        ours: pid('epd-coordinator'),
        go: go.pid,
        envoy: pid('envoy'),
        epp: pid('epp'),
        node: nodeFloor.coordinator.pid,
        nodeEnvoy: nodeFloor.envoy.pid,
      },
      oursMetricsUrl: `http://127.0.0.1:${ports.metrics}/metrics`,
      adminUrl: stack.adminUrl,
      stop: async () => {
        await nodeFloor.stop();
        await stack.stop();
        await goProc.stop();
      },
    };
  } catch (err) {
    await node?.stop();
    await go?.stop();
    await stack.stop();
    throw err;
  }
}
