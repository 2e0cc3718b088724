/**
 * The product on loopback like test/support/stack.ts, but with topologies the shipped bootstrap
 * does not render: several prefill workers behind the gateway's prefill cluster, and an Envoy edit
 * hook (e.g. an EPP-like reserve answer).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { startSimulator, type Simulator } from '../../../sim/simulator';
import { parseConfig } from '../../../src/config/config';
import { createLogger } from '../../../src/observability/logger';
import { startService, type RunningService } from '../../../src/service';
import { freePort } from '../../../launch/ports';
import { stackConfigDoc, type StackOptions } from '../../support/stack';
import { startCustomEnvoy, withClusterEndpoints, type CustomEnvoy } from './custom-envoy';

export interface CustomStackOptions extends StackOptions {
  /** Prefill workers behind the prefill cluster. Default 1. */
  readonly prefillWorkers?: number;
  /** Edits the rendered bootstrap; receives the prefill workers' addresses. */
  readonly editEnvoy?: (yaml: string, ctx: { prefill: readonly string[] }) => string;
}

export interface CustomStack {
  readonly publicUrl: string;
  readonly envoy: CustomEnvoy;
  readonly service: RunningService;
  readonly render: Simulator;
  readonly encode: Simulator;
  readonly prefill: readonly Simulator[];
  readonly decode: Simulator;
  readonly dir: string;
  reset(): void;
  close(): Promise<void>;
}

export async function startCustomStack(opts: CustomStackOptions): Promise<CustomStack> {
  const dir = mkdtempSync(join(tmpdir(), 'epd-faults-'));
  const sims: Simulator[] = [];
  let service: RunningService | undefined;
  let envoy: CustomEnvoy | undefined;
  const logDest = pino.destination({ dest: join(dir, 'service.log'), sync: true });
  const close = async (): Promise<void> => {
    await envoy?.stop().catch(() => undefined);
    await service?.close(500).catch(() => undefined);
    await Promise.all(sims.map((s) => s.close().catch(() => undefined)));
    logDest.end();
    if (!process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  };
  try {
    const sim = async (name: string, role: 'render' | 'encode' | 'prefill' | 'decode'): Promise<Simulator> => {
      const s = await startSimulator({ ...opts.simulator, name, role, port: 0 });
      sims.push(s);
      return s;
    };
    const render = await sim('sim-render-0', 'render');
    const encode = await sim('sim-encode-0', 'encode');
    const prefill: Simulator[] = [];
    for (let i = 0; i < (opts.prefillWorkers ?? 1); i++) prefill.push(await sim(`sim-prefill-${i}`, 'prefill'));
    const decode = await sim('sim-decode-0', 'decode');
    const gatewayPort = await freePort();
    const config = parseConfig(stackConfigDoc(opts, { gateway: `http://127.0.0.1:${gatewayPort}`, render: render.url }), {});
    service = await startService(config, { log: createLogger(opts.logLevel ?? 2, logDest) });
    const prefillAddrs = prefill.map((p) => `127.0.0.1:${p.port}`);
    envoy = await startCustomEnvoy(
      join(dir, 'envoy'),
      {
        bodyMode: opts.bodyMode ?? 'full_duplex',
        gatewayPort,
        extProcAddress: `127.0.0.1:${service.grpcPort}`,
        encodeAddress: `127.0.0.1:${encode.port}`,
        prefillAddress: prefillAddrs[0]!,
        decodeAddress: `127.0.0.1:${decode.port}`,
        ...opts.envoyPolicy,
      },
      (yaml) => {
        const multi = prefillAddrs.length > 1 ? withClusterEndpoints(yaml, 'prefill_workers', prefillAddrs) : yaml;
        return opts.editEnvoy ? opts.editEnvoy(multi, { prefill: prefillAddrs }) : multi;
      },
    );
    return {
      publicUrl: envoy.publicUrl,
      envoy,
      service,
      render,
      encode,
      prefill,
      decode,
      dir,
      reset: () => {
        for (const s of sims) {
          s.clear();
          s.setFaults([]);
        }
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
