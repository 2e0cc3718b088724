export * from './connector';
export { sharedStorageKv } from './shared-storage';
export { nixlKv, nixlKvWithDataParallel } from './nixl';
export {
  sglangKv,
  sglangSerialKv,
  sglangConcurrentKv,
  randomBootstrapRoom,
  parseSglangBootstrapPort,
  SGLANG_BOOTSTRAP_PORT_ENV,
  DEFAULT_SGLANG_BOOTSTRAP_PORT,
  type ConcurrentKvConnector,
} from './sglang';
export { HEADER_DATA_PARALLEL_RANK, hashDataParallelRank, decodeDataParallelRank } from './dp-rank';
export { buildKvConnector, buildConcurrentKvConnector, type KvConnectorOptions } from './build';
