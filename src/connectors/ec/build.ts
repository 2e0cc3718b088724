import { UnknownConnectorError } from '../unknown-connector-error';
import type { EcConnector } from './connector';
import { EC_CONNECTOR_NAMES } from './connector';
import { nixlEc } from './nixl';
import { sharedStorageEc } from './shared-storage';

const BY_NAME: ReadonlyMap<string, EcConnector> = new Map([
  [sharedStorageEc.name, sharedStorageEc],
  [nixlEc.name, nixlEc],
]);

/**
 * The EC connector a step's `ec_connector` param names; `""` is the default, ec-shared-storage.
 * Throws an {@link UnknownConnectorError} (`<step>: unknown ec_connector: "x"`) otherwise.
 */
export function buildEcConnector(name: string, stepName: string): EcConnector {
  if (name === '') return sharedStorageEc;
  const connector = BY_NAME.get(name);
  if (!connector) throw new UnknownConnectorError(stepName, 'ec_connector', name, EC_CONNECTOR_NAMES);
  return connector;
}
