/**
 * The compare bench's `node` setup: the bare Node coordinator (bare-coordinator.ts) as a process,
 * and, for the deploy topology, the Envoy of its own in front of it.
 *
 * Each setup has its own Envoy so that each Envoy's CPU belongs to one setup. In the deploy topology
 * that Envoy is the production topology's (launch/topology-envoy.ts: our ext_proc filter, then the
 * EPP's, to the ORIGINAL_DST cluster; a gateway listener with the EPP alone) rendered for the bare
 * coordinator, and it shares the run's EPP and workers with ours and Go: the same scheduling and the
 * same legs. Its coordinator cluster has no health check, since the bare coordinator has no health
 * service.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../../launch/envoy-bootstrap';
import { ensureEnvoy } from '../../launch/envoy';
import { eppStackEnvoyArgv } from '../../launch/epp-stack-plan';
import { freePort } from '../../launch/ports';
import { startChild } from '../../launch/supervise';
import { renderEnvoyConfig } from '../../launch/topology-envoy';
import { childProc, startPolled, type Proc } from './procs';
import type { StackArgs } from './stack';

/** Starts the bare coordinator on `port`: render direct at `renderUrl`, prefill through `gatewayUrl`. */
export async function startBareCoordinator(o: {
  readonly dir: string;
  readonly port: number;
  readonly renderUrl: string;
  readonly gatewayUrl: string;
  readonly args: StackArgs;
  /** Where --cpu-prof writes this process's profile, when the run profiles. */
  readonly profileDir?: string;
}): Promise<Proc> {
  const profile = o.profileDir ? ['--cpu-prof', `--cpu-prof-dir=${o.profileDir}`] : [];
  const child = await startChild({
    name: 'bare-coordinator',
    command: o.args.serviceNode,
    args: [
      ...o.args.serviceNodeFlags,
      ...profile,
      join(REPO_ROOT, 'dist', 'bench', 'compare', 'bare-coordinator.js'),
      ...['--port', String(o.port), '--render', o.renderUrl, '--gateway', o.gatewayUrl],
    ],
    env: { ...process.env, ...o.args.serviceEnv },
    cwd: REPO_ROOT,
    logPath: join(o.dir, 'bare-coordinator.log'),
    ready: /^listening \d+/,
  });
  return childProc(child);
}

export interface DeployNodeFloor {
  readonly publicUrl: string;
  readonly coordinator: Proc;
  readonly envoy: Proc;
  stop(): Promise<void>;
}

/** The deploy topology's node setup: the bare coordinator behind a production-topology Envoy of its own. */
export async function startDeployNodeFloor(o: {
  readonly dir: string;
  readonly renderPort: number;
  readonly eppGrpcPort: number;
  readonly args: StackArgs;
  readonly profileDir?: string;
}): Promise<DeployNodeFloor> {
  const port = { extProc: await freePort(), public: await freePort(), gateway: await freePort(), admin: await freePort() };
  const coordinator = await startBareCoordinator({
    dir: o.dir,
    port: port.extProc,
    renderUrl: `http://127.0.0.1:${o.renderPort}`,
    gatewayUrl: `http://127.0.0.1:${port.gateway}`,
    args: o.args,
    ...(o.profileDir ? { profileDir: o.profileDir } : {}),
  });
  const config = join(o.dir, 'envoy-node.yaml');
  writeFileSync(
    config,
    renderEnvoyConfig({
      publicAddress: '127.0.0.1',
      publicPort: port.public,
      gatewayPort: port.gateway,
      adminPort: port.admin,
      coordinatorAddress: `127.0.0.1:${port.extProc}`,
      eppAddress: `127.0.0.1:${o.eppGrpcPort}`,
      accessLogPath: join(o.dir, 'envoy-node-access.log'),
      coordinatorHealthCheck: false,
      reusePort: false,
    }),
  );
  let envoy: Proc;
  try {
    envoy = await startPolled(
      'envoy-node',
      ensureEnvoy(),
      // The EPP stack's Envoy flags (launch/epp-stack-plan.ts), its log at warn.
      eppStackEnvoyArgv(config, 'warn'),
      join(o.dir, 'envoy-node.log'),
      `http://127.0.0.1:${port.admin}/ready`,
    );
  } catch (err) {
    await coordinator.stop();
    throw err;
  }
  return {
    publicUrl: `http://127.0.0.1:${port.public}`,
    coordinator,
    envoy,
    stop: async () => {
      await envoy.stop();
      await coordinator.stop();
    },
  };
}
