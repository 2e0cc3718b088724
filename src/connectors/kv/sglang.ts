import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { KvConnector } from './connector';
import { decodeFromPrefillResponse, KV_SGLANG } from './connector';

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
function bootstrapPort(log: Logger): number {
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

/**
 * SGLang: prefill and decode meet in a bootstrap room on the prefill pod. The room is a fresh
 * UUIDv4 string per request (upstream quirk Q11: SGLang itself uses integers); no
 * `bootstrap_host` is sent. Decode echoes what the prefill worker answered.
 */
export const sglangKv: KvConnector = {
  name: KV_SGLANG,
  preparePrefill: (ctx) => ({
    do_remote_decode: true,
    do_remote_prefill: false,
    bootstrap_port: bootstrapPort(ctx.log),
    bootstrap_room: randomUUID(),
  }),
  prepareDecode: decodeFromPrefillResponse,
};
