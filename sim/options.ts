/** Validating simulator options (from code or the CLI) into a complete, bounded settings object. */

import { SimulatorConfigError } from './errors';
import { DEFAULT_PREFIX_TOKENS } from './prefix-cache';
import type { SimMode, SimRole, SimulatorOptions } from './types';

export const DEFAULT_MAX_BODY_BYTES = 128 * 1024 * 1024;
const MAX_MAX_BODY_BYTES = 1024 * 1024 * 1024;
const MAX_LATENCY_MS = 10 * 60 * 1000;
const MAX_NAME_CHARS = 128;
const MAX_PREFIX_TOKENS = 1_000_000;

export const ROLES: readonly SimRole[] = ['any', 'encode', 'prefill', 'decode', 'render'];
export const MODES: readonly SimMode[] = ['echo', 'random'];

export interface SimulatorSettings {
  readonly host: '127.0.0.1';
  readonly port: number;
  readonly name: string;
  readonly role: SimRole;
  readonly mode: SimMode;
  readonly interTokenLatencyMs: number;
  readonly timeToFirstTokenMs: number;
  readonly maxBodyBytes: number;
  readonly maxRecordedRequests: number;
  readonly maxRecordedBytes: number;
  readonly honourPreferIfAvailable: boolean;
  readonly prefixTokens: number;
  readonly responsesRender: boolean;
}

function int(value: number | undefined, fallback: number, min: number, max: number, key: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new SimulatorConfigError(`${key} must be an integer in [${min}, ${max}], got ${String(value)}`);
  }
  return value;
}

function bool(value: boolean | undefined, fallback: boolean, key: string): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new SimulatorConfigError(`${key} must be true or false, got ${String(value)}`);
  return value;
}

export function resolveOptions(opts: SimulatorOptions): SimulatorSettings {
  // The name goes out as a header value: printable ASCII only.
  if (typeof opts.name !== 'string' || !/^[\x21-\x7e]{1,128}$/.test(opts.name)) {
    throw new SimulatorConfigError(`name must be 1-${MAX_NAME_CHARS} printable ASCII characters without spaces`);
  }
  if (opts.host !== undefined && opts.host !== '127.0.0.1') {
    throw new SimulatorConfigError(`host must be 127.0.0.1 (loopback only), got ${String(opts.host)}`);
  }
  const role = opts.role ?? 'any';
  if (!ROLES.includes(role)) throw new SimulatorConfigError(`role must be one of ${ROLES.join(', ')}`);
  const mode = opts.mode ?? 'echo';
  if (!MODES.includes(mode)) throw new SimulatorConfigError(`mode must be one of ${MODES.join(', ')}`);
  return {
    host: '127.0.0.1',
    port: int(opts.port, 0, 0, 65535, 'port'),
    name: opts.name,
    role,
    mode,
    interTokenLatencyMs: int(opts.interTokenLatencyMs, 0, 0, MAX_LATENCY_MS, 'interTokenLatencyMs'),
    timeToFirstTokenMs: int(opts.timeToFirstTokenMs, 0, 0, MAX_LATENCY_MS, 'timeToFirstTokenMs'),
    maxBodyBytes: int(opts.maxBodyBytes, DEFAULT_MAX_BODY_BYTES, 1, MAX_MAX_BODY_BYTES, 'maxBodyBytes'),
    maxRecordedRequests: int(opts.maxRecordedRequests, 1000, 1, 100_000, 'maxRecordedRequests'),
    maxRecordedBytes: int(opts.maxRecordedBytes, 256 * 1024 * 1024, 0, MAX_MAX_BODY_BYTES, 'maxRecordedBytes'),
    honourPreferIfAvailable: bool(opts.honourPreferIfAvailable, false, 'honourPreferIfAvailable'),
    prefixTokens: int(opts.prefixTokens, DEFAULT_PREFIX_TOKENS, 1, MAX_PREFIX_TOKENS, 'prefixTokens'),
    responsesRender: bool(opts.responsesRender, false, 'responsesRender'),
  };
}
