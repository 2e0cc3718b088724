import { ConfigError } from '../../config/errors';
import { UnknownConnectorError } from '../unknown-connector-error';
import type { KvConnector } from './connector';
import { KV_CONNECTOR_NAMES, KV_NIXL, KV_SGLANG, KV_SHARED_STORAGE } from './connector';
import { nixlKvWithDataParallel } from './nixl';
import { sglangConcurrentKv, sglangKv, sglangSerialKv, type ConcurrentKvConnector } from './sglang';
import { sharedStorageKv } from './shared-storage';

export interface KvConnectorOptions {
  /** Data-parallel engine ranks behind each pool (step param `dp_size`, >= 1). Only kv-nixl uses it. */
  readonly dpSize?: number;
  /** The step's `kv_connector_params` as configured (validated here). */
  readonly connectorParams?: unknown;
}

function paramsKey(stepName: string): string {
  return `${stepName}.params.kv_connector_params`;
}

/**
 * `kv_connector_params`: an empty map counts as absent; only kv-sglang takes
 * any, and only `bootstrap_port` (1-65535). Returns the configured port, if any.
 */
function readConnectorParams(name: string, stepName: string, raw: unknown): { bootstrapPort?: number } {
  if (raw === undefined || raw === null) return {};
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new ConfigError(paramsKey(stepName), 'a map', raw);
  const entries = Object.entries(raw as Record<string, unknown>);
  if (entries.length === 0) return {};
  if (name !== KV_SGLANG) {
    throw new ConfigError(paramsKey(stepName), `no params (kv_connector ${JSON.stringify(name || KV_SHARED_STORAGE)} takes none)`, raw);
  }
  const out: { bootstrapPort?: number } = {};
  for (const [key, value] of entries) {
    if (key !== 'bootstrap_port') throw new ConfigError(`${paramsKey(stepName)}.${key}`, 'no such key (known: bootstrap_port)', value);
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 65535) {
      throw new ConfigError(`${paramsKey(stepName)}.bootstrap_port`, 'an integer port 1-65535', value);
    }
    out.bootstrapPort = value;
  }
  return out;
}

function checkDpSize(stepName: string, dpSize: number | undefined): number {
  if (dpSize === undefined) return 1;
  if (!Number.isInteger(dpSize) || dpSize < 1) throw new ConfigError(`${stepName}.params.dp_size`, 'an integer >= 1', dpSize);
  return dpSize;
}

/**
 * The KV connector a step's `kv_connector` param names; `""` is the default, kv-shared-storage.
 * Throws an {@link UnknownConnectorError} (`<step>: unknown kv_connector: "x"`) otherwise, and a
 * ConfigError for bad `dp_size` / `kv_connector_params`.
 */
export function buildKvConnector(name: string, stepName: string, opts: KvConnectorOptions = {}): KvConnector {
  const dpSize = checkDpSize(stepName, opts.dpSize);
  const { bootstrapPort } = readConnectorParams(name, stepName, opts.connectorParams);
  switch (name) {
    case '':
    case KV_SHARED_STORAGE:
      return sharedStorageKv;
    case KV_NIXL:
      return nixlKvWithDataParallel(dpSize);
    case KV_SGLANG:
      return bootstrapPort === undefined ? sglangKv : sglangSerialKv(bootstrapPort);
    default:
      throw new UnknownConnectorError(stepName, 'kv_connector', name, KV_CONNECTOR_NAMES);
  }
}

/**
 * The connector of a step that runs prefill and decode together (`prefill-decode`). Only kv-sglang
 * needs that; the serial connectors are refused with upstream's message.
 */
export function buildConcurrentKvConnector(name: string, stepName: string, opts: KvConnectorOptions = {}): ConcurrentKvConnector {
  checkDpSize(stepName, opts.dpSize);
  if (name !== KV_SGLANG) {
    if (name !== '' && !(KV_CONNECTOR_NAMES as readonly string[]).includes(name)) {
      throw new UnknownConnectorError(stepName, 'kv_connector', name, KV_CONNECTOR_NAMES);
    }
    const err = new ConfigError(`${stepName}.params.kv_connector`, KV_SGLANG, name || KV_SHARED_STORAGE);
    err.message = `${stepName}: kv_connector ${JSON.stringify(name || KV_SHARED_STORAGE)} sends prefill and decode one after the other; use the "prefill" and "decode" steps`;
    throw err;
  }
  const { bootstrapPort } = readConnectorParams(name, stepName, opts.connectorParams);
  return sglangConcurrentKv(bootstrapPort);
}
