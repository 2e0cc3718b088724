/**
 * The whole product on loopback, in one process plus one Envoy: worker simulators (render,
 * encode, prefill, decode), the coordinator service (in-process, via startService) and a real
 * Envoy with the shipped bootstrap. Used by the e2e suite and the bench.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import type { Logger } from 'pino';
import type { EnvoyBodyMode } from '../../launch/envoy-bootstrap';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../sim/simulator';
import { parseConfig, type AppConfig } from '../../src/config/config';
import { createLogger } from '../../src/observability/logger';
import { startService, type RunningService } from '../../src/service';
import { AccessLog } from './access-log';
import { EnvoyStartError, startEnvoy, type EnvoyHandle } from '../../launch/envoy';
import { freePort } from '../../launch/ports';

export type Role = 'render' | 'encode' | 'prefill' | 'decode';
export const ROLES: readonly Role[] = ['render', 'encode', 'prefill', 'decode'];

export interface StepYaml {
  type: string;
  params?: Record<string, unknown>;
}

export interface StackOptions {
  /** Envoy's ext_proc request body mode. Default full_duplex. */
  readonly bodyMode?: EnvoyBodyMode;
  /** `pipeline.kv_connector`. Default kv-shared-storage. */
  readonly kvConnector?: string;
  readonly useOpenaiFormat?: boolean;
  /** `server.max_request_body_size` in MiB. Default 64. */
  readonly maxRequestBodyMb?: number;
  /** `gateway.timeout`. Default 60s. */
  readonly gatewayTimeout?: string;
  /** The pipeline; default render -> prefill -> decode. Receives the render simulator's URL. */
  readonly steps?: (urls: { render: string }) => StepYaml[];
  /** Options applied to every simulator (names and roles are the stack's). */
  readonly simulator?: Omit<SimulatorOptions, 'name' | 'role' | 'port' | 'host'>;
  /** Service log level (upstream verbosity 1-5); the log goes to `<dir>/service.log`. Default 2. */
  readonly logLevel?: number;
  readonly envoyLogLevel?: string;
  /** `max_requests_per_connection` of Envoy's coordinator cluster (bootstrap default 500); 0 = none, as on a stock Envoy. */
  readonly extProcStreamCap?: number;
  /** `server.trusted_client_headers`. Default none. */
  readonly trustedClientHeaders?: readonly string[];
  /** The public listener without Envoy's path policy: every path goes to the coordinator (launch/envoy-bootstrap.ts catchAll). */
  readonly envoyCatchAll?: boolean;
  /** Edits the rendered Envoy bootstrap before Envoy reads it (launch/envoy.ts editConfig). */
  readonly editEnvoyConfig?: (yaml: string) => string;
  /** A whole coordinator config document instead of {@link stackConfigDoc} (given the addresses). */
  readonly configDoc?: (urls: { gateway: string; render: string }) => Record<string, unknown>;
}

export interface Stack {
  /** Where clients send requests: Envoy's public listener. */
  readonly publicUrl: string;
  /** Envoy's internal gateway listener (side calls). */
  readonly gatewayUrl: string;
  /** Envoy's async-processor entry (trusted origin `async-processor`). */
  readonly asyncUrl: string;
  readonly envoy: EnvoyHandle;
  readonly service: RunningService;
  readonly config: AppConfig;
  readonly sims: Readonly<Record<Role, Simulator>>;
  readonly accessLog: AccessLog;
  /** Temp directory with the Envoy config, Envoy log, access log and service log. */
  readonly dir: string;
  /** Forget recorded requests and remove fault rules on every simulator. */
  reset(): void;
  close(): Promise<void>;
}

export function defaultSteps(urls: { render: string }): StepYaml[] {
  return [{ type: 'render', params: { address: urls.render, timeout: '30s' } }, { type: 'prefill' }, { type: 'decode' }];
}

/** The coordinator config the stack runs (YAML shape, before parsing). */
export function stackConfigDoc(opts: StackOptions, urls: { gateway: string; render: string }): Record<string, unknown> {
  return {
    log_level: opts.logLevel ?? 2,
    server: {
      listen_addr: '127.0.0.1:0',
      max_request_body_size: opts.maxRequestBodyMb ?? 64,
      body_mode: 'auto',
      shutdown_timeout: '1s',
      // Loopback and an ephemeral port: the default (:9464 on every interface) would collide between suites.
      metrics_addr: '127.0.0.1:0',
      ...(opts.trustedClientHeaders ? { trusted_client_headers: [...opts.trustedClientHeaders] } : {}),
    },
    gateway: { address: urls.gateway, timeout: opts.gatewayTimeout ?? '60s' },
    pipeline: {
      kv_connector: opts.kvConnector ?? 'kv-shared-storage',
      use_openai_format: opts.useOpenaiFormat ?? true,
      steps: (opts.steps ?? defaultSteps)({ render: urls.render }),
    },
  };
}

const ENVOY_BIND_ATTEMPTS = 3;

export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const dir = mkdtempSync(join(tmpdir(), 'epd-stack-'));
  const sims: Partial<Record<Role, Simulator>> = {};
  let service: RunningService | undefined;
  let envoy: EnvoyHandle | undefined;
  let logDest: ReturnType<typeof pino.destination> | undefined;

  const teardown = async (): Promise<void> => {
    await envoy?.stop().catch(() => undefined);
    await service?.close(500).catch(() => undefined);
    await Promise.all(Object.values(sims).map((s) => s.close().catch(() => undefined)));
    logDest?.end();
    if (!process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  };

  try {
    for (const role of ROLES) {
      sims[role] = await startSimulator({ ...opts.simulator, name: `sim-${role}-0`, role, port: 0 });
    }
    const s = sims as Record<Role, Simulator>;
    logDest = pino.destination({ dest: join(dir, 'service.log'), sync: true });
    const log: Logger = createLogger(opts.logLevel ?? 2, logDest);

    // The service needs the gateway listener's address before Envoy starts, and Envoy needs the
    // service's port: pick the gateway port up front and retry if someone takes it meanwhile.
    let config: AppConfig | undefined;
    for (let attempt = 1; ; attempt++) {
      const gatewayPort = await freePort();
      const urls = { gateway: `http://127.0.0.1:${gatewayPort}`, render: s.render.url };
      config = parseConfig(opts.configDoc ? opts.configDoc(urls) : stackConfigDoc(opts, urls), {});
      service = await startService(config, { log });
      try {
        envoy = await startEnvoy({
          dir: join(dir, 'envoy'),
          logLevel: opts.envoyLogLevel,
          ...(opts.editEnvoyConfig ? { editConfig: opts.editEnvoyConfig } : {}),
          bootstrap: {
            ...(opts.envoyCatchAll ? { catchAll: true } : {}),
            bodyMode: opts.bodyMode ?? 'full_duplex',
            gatewayPort,
            extProcAddress: `127.0.0.1:${service.grpcPort}`,
            encodeAddress: `127.0.0.1:${s.encode.port}`,
            prefillAddress: `127.0.0.1:${s.prefill.port}`,
            decodeAddress: `127.0.0.1:${s.decode.port}`,
            accessLogPath: join(dir, 'access.log'),
            ...(opts.extProcStreamCap !== undefined ? { extProcStreamCap: opts.extProcStreamCap } : {}),
          },
        });
        break;
      } catch (err) {
        await service.close(0);
        service = undefined;
        if (!(err instanceof EnvoyStartError && err.addressInUse) || attempt >= ENVOY_BIND_ATTEMPTS) throw err;
      }
    }
    const runningEnvoy = envoy!;
    return {
      publicUrl: runningEnvoy.publicUrl,
      gatewayUrl: runningEnvoy.gatewayUrl,
      asyncUrl: runningEnvoy.asyncUrl,
      envoy: runningEnvoy,
      service: service!,
      config,
      sims: s,
      accessLog: new AccessLog(runningEnvoy.accessLogPath),
      dir,
      reset: () => {
        for (const sim of Object.values(s)) {
          sim.clear();
          sim.setFaults([]);
        }
      },
      close: teardown,
    };
  } catch (err) {
    await teardown();
    throw err;
  }
}
