import { randomBytes, randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { KvConnector, KvConnectorName } from './connector';
import { decodeFromPrefillResponse, KV_SGLANG } from './connector';
import { HEADER_DATA_PARALLEL_RANK } from './dp-rank';

export const SGLANG_BOOTSTRAP_PORT_ENV = 'SGLANG_BOOTSTRAP_PORT';
export const DEFAULT_SGLANG_BOOTSTRAP_PORT = 8998;

/**
 * The bootstrap port from the raw env value. Empty selects the default; anything but a plain
 * decimal integer in 1..65535 is rejected (default, and `rejected` so the caller can log it).
 */
export function parseSglangBootstrapPort(raw: string): { port: number; rejected: boolean } {
  if (raw === '') return { port: DEFAULT_SGLANG_BOOTSTRAP_PORT, rejected: false };
  // Go's strconv.Atoi: optional sign, decimal digits only (no spaces, no "9100x", no "0x1f").
  if (!/^[+-]?\d+$/.test(raw)) return { port: DEFAULT_SGLANG_BOOTSTRAP_PORT, rejected: true };
  const p = Number(raw);
  if (p < 1 || p > 65535) return { port: DEFAULT_SGLANG_BOOTSTRAP_PORT, rejected: true };
  return { port: p, rejected: false };
}

let resolvedPort: number | undefined;

/** Reads the env once, process-wide, on first use, where a logger is at hand to report a bad value. */
function envBootstrapPort(log: Logger): number {
  if (resolvedPort === undefined) {
    const raw = process.env[SGLANG_BOOTSTRAP_PORT_ENV] ?? '';
    const { port, rejected } = parseSglangBootstrapPort(raw);
    if (rejected) {
      log.error(
        { env: SGLANG_BOOTSTRAP_PORT_ENV, value: raw.slice(0, 64), default: DEFAULT_SGLANG_BOOTSTRAP_PORT },
        'using default SGLang bootstrap port',
      );
    }
    resolvedPort = port;
  }
  return resolvedPort;
}

/** `kv_connector_params.bootstrap_port` when configured, else the env, else 8998. */
function bootstrapPort(configured: number | undefined, log: Logger): number {
  return configured ?? envBootstrapPort(log);
}

/**
 * SGLang as the baseline upstream serial `prefill` -> `decode` steps speak it: the room is a fresh
 * UUIDv4 string per request, no `bootstrap_host` is sent, and decode echoes what the
 * prefill worker answered. Kept for config compatibility only: a real SGLang prefill waits for its
 * decode peer, so this flow cannot complete against SGLang; use the `prefill-decode` step.
 */
export function sglangSerialKv(configuredPort?: number): KvConnector {
  return {
    name: KV_SGLANG,
    preparePrefill: (ctx) => ({
      do_remote_decode: true,
      do_remote_prefill: false,
      bootstrap_port: bootstrapPort(configuredPort, ctx.log),
      bootstrap_room: randomUUID(),
    }),
    prepareDecode: decodeFromPrefillResponse,
  };
}

export const sglangKv: KvConnector = sglangSerialKv();

/**
 * A random bootstrap room. SGLang wants an integer (upstream uses [0, 2^63)); a JSON number is
 * exact only below 2^53, and both legs must carry the very same value, so the room is drawn from
 * [0, 2^53).
 */
export function randomBootstrapRoom(): number {
  return Number(randomBytes(8).readBigUInt64BE(0) & ((1n << 53n) - 1n));
}

/**
 * A KV connector whose prefill and decode must be in flight together (today only SGLang): the
 * prefill worker holds the request until its decode peer connects to the bootstrap server named in
 * both bodies. Used by the `prefill-decode` step.
 */
export interface ConcurrentKvConnector {
  readonly name: KvConnectorName;
  /** Top-level fields written into both the prefill and the decode body. */
  transferFields(prefillHost: string, log: Logger): Record<string, unknown>;
  /** Client body fields removed from both bodies (they would steer the transfer elsewhere). */
  readonly removedBodyFields: readonly string[];
  /** Client headers forwarded on no leg, for the same reason. */
  readonly conflictingHeaders: readonly string[];
}

/**
 * SGLang disaggregation as SGLang's own router drives it (what llm-d-router #2974 asks for):
 * `bootstrap_host` = the reserved prefill pod, `bootstrap_port`, and one integer `bootstrap_room`
 * shared by both legs, all top level; no `kv_transfer_params`; no client DP-rank steering.
 */
export function sglangConcurrentKv(configuredPort?: number): ConcurrentKvConnector {
  return {
    name: KV_SGLANG,
    transferFields: (prefillHost, log) => ({
      bootstrap_host: prefillHost,
      bootstrap_port: bootstrapPort(configuredPort, log),
      bootstrap_room: randomBootstrapRoom(),
    }),
    removedBodyFields: ['routed_dp_rank', 'data_parallel_rank', 'disagg_prefill_dp_rank'],
    conflictingHeaders: [HEADER_DATA_PARALLEL_RANK],
  };
}
