import type { EcConnector } from './connector';
import { EC_SHARED_STORAGE } from './connector';

/** Encoder outputs go through shared storage: nothing is recorded and nothing travels. */
export const sharedStorageEc: EcConnector = {
  name: EC_SHARED_STORAGE,
  mergeEncodeResponse: () => {},
  preparePrefill: () => ({}),
};
