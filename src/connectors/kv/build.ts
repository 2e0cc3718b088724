import { UnknownConnectorError } from '../unknown-connector-error';
import type { KvConnector } from './connector';
import { KV_CONNECTOR_NAMES } from './connector';
import { nixlKv } from './nixl';
import { sglangKv } from './sglang';
import { sharedStorageKv } from './shared-storage';

const BY_NAME: ReadonlyMap<string, KvConnector> = new Map([
  [sharedStorageKv.name, sharedStorageKv],
  [nixlKv.name, nixlKv],
  [sglangKv.name, sglangKv],
]);

/**
 * The KV connector a step's `kv_connector` param names; `""` is the default, kv-shared-storage.
 * Throws an {@link UnknownConnectorError} (`<step>: unknown kv_connector: "x"`) otherwise.
 */
export function buildKvConnector(name: string, stepName: string): KvConnector {
  if (name === '') return sharedStorageKv;
  const connector = BY_NAME.get(name);
  if (!connector) throw new UnknownConnectorError(stepName, 'kv_connector', name, KV_CONNECTOR_NAMES);
  return connector;
}
