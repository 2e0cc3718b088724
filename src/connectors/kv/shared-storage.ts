import type { KvConnector } from './connector';
import { KV_SHARED_STORAGE } from './connector';

/** KV blocks go through shared storage: only the direction flags travel; the prefill answer is ignored. */
export const sharedStorageKv: KvConnector = {
  name: KV_SHARED_STORAGE,
  preparePrefill: () => ({ do_remote_decode: true, do_remote_prefill: false }),
  prepareDecode: () => ({ do_remote_decode: false, do_remote_prefill: true }),
};
