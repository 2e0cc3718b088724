export * from './connector';
export { sharedStorageEc } from './shared-storage';
export { nixlEc } from './nixl';
export { buildEcConnector } from './build';
