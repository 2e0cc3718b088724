/** A real ext_proc server on 127.0.0.1 with a scripted handler, and an Envoy-like client. */
import { randomBytes } from 'node:crypto';
import { startExtProcServer, type ExtProcServer, type ExtProcServerOptions } from '../../src/extproc';
import type { FallbackBodyMode } from '../../src/extproc/body-mode';
import { startSimulator, type Simulator } from '../../sim/simulator';
import { parseConfig } from '../../src/config/config';
import { silentLogger } from '../../src/observability/logger';
import { startService, type RunningService } from '../../src/service';
import { EnvoyClient } from './envoy-client';
import { respond, ScriptedHandler } from './fake-handler';

export const NS = 'epd.coordinator';

export interface Harness {
  readonly server: ExtProcServer;
  readonly client: EnvoyClient;
  readonly handler: ScriptedHandler;
  close(): Promise<void>;
}

/** Server bounds a suite may set (defaults: the server's own). */
export type HarnessBounds = Pick<ExtProcServerOptions, 'streamIdleTimeoutMs' | 'maxRequestHeaders'>;

/** Our ext_proc server on a free loopback port, answering from a {@link ScriptedHandler}; `extra` overrides. */
export function startScriptedServer(extra: Partial<ExtProcServerOptions> = {}): Promise<ExtProcServer> {
  return startExtProcServer({
    address: '127.0.0.1:0',
    handler: new ScriptedHandler(),
    maxBodyBytes: 1024 * 1024,
    metadataNamespace: NS,
    fallbackBodyMode: 'full_duplex',
    log: silentLogger(),
    ...extra,
  });
}

export async function startHarness(
  fallbackBodyMode: FallbackBodyMode,
  maxBodyBytes = 64 * 1024 * 1024,
  bounds: HarnessBounds = {},
): Promise<Harness> {
  const handler = new ScriptedHandler();
  const server = await startScriptedServer({ handler, maxBodyBytes, fallbackBodyMode, ...bounds });
  const client = new EnvoyClient(server.port);
  return {
    server,
    client,
    handler,
    async close() {
      client.close();
      await server.shutdown(1000);
    },
  };
}

/** A plain request still gets its answer, and the call ends OK: the server survived what came before. */
export async function expectStillServing(h: { readonly handler: ScriptedHandler; readonly client: EnvoyClient }): Promise<void> {
  h.handler.reset(() => ({ decide: () => respond(200, {}, Buffer.from('ok')) }));
  const s = h.client.open();
  s.sendHeaders(chatHeaders(), { endOfStream: true });
  expect((await s.next()).immediate_response!.body.toString()).toBe('ok');
  s.end();
  expect((await s.status).code).toBe(0);
}

/** Headers of a typical inference request, as Envoy forwards them. */
export function chatHeaders(extra: Array<[string, string]> = []): Array<[string, string]> {
  return [
    [':method', 'POST'],
    [':path', '/v1/chat/completions'],
    [':authority', 'gateway.local'],
    [':scheme', 'http'],
    ['content-type', 'application/json'],
    ['content-length', '1234'],
    ['x-request-id', 'req-1'],
    ...extra,
  ];
}

/** Random bytes: no two chunks alike, so a misplaced or duplicated chunk is caught. */
export function patternBytes(n: number): Buffer {
  return randomBytes(n);
}

export interface ServiceWithSimulator {
  readonly sim: Simulator;
  readonly service: RunningService;
  readonly client: EnvoyClient;
}

/**
 * For one suite: a simulator playing every worker, the real service (prefill -> decode through it,
 * with the given `server:` settings) and an Envoy-like client on its gRPC port.
 */
export function useServiceWithSimulator(server: Record<string, unknown> = {}): ServiceWithSimulator {
  const h = {} as { sim: Simulator; service: RunningService; client: EnvoyClient };
  beforeAll(async () => {
    h.sim = await startSimulator({ name: 'sim-any', role: 'any' });
    h.service = await startService(
      parseConfig(
        {
          server: { listen_addr: '127.0.0.1:0', metrics_addr: '', ...server },
          gateway: { address: h.sim.url },
          pipeline: { steps: [{ type: 'prefill' }, { type: 'decode' }] },
        },
        {},
      ),
      { log: silentLogger() },
    );
    h.client = new EnvoyClient(h.service.grpcPort);
  });
  afterAll(async () => {
    h.client?.close();
    await h.service?.close(500);
    await h.sim?.close();
  });
  return h;
}
