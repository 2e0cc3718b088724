export * from './connector';
export { sharedStorageKv } from './shared-storage';
export { nixlKv } from './nixl';
export { sglangKv, parseSglangBootstrapPort, SGLANG_BOOTSTRAP_PORT_ENV, DEFAULT_SGLANG_BOOTSTRAP_PORT } from './sglang';
export { buildKvConnector } from './build';
