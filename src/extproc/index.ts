/** The Envoy ext_proc protocol layer: what the rest of the service uses of src/extproc/. */
export {
  startExtProcServer,
  addExtProcService,
  extProcServerOptions,
  messageLimits,
  MESSAGE_HEADROOM_BYTES,
  DEFAULT_STREAM_IDLE_TIMEOUT_MS,
  type ExtProcServer,
  type ExtProcServerOptions,
  type ExtProcService,
  type ExtProcServiceOptions,
  type MessageLimits,
} from './server';
export type { FallbackBodyMode } from './body-mode';
export { loadExtProcPackage, extProcServiceDefinition, findProtoRoot, EXT_PROC_SERVICE_NAME, PROTO_LOADER_OPTIONS } from './proto';
export { envoyStatusCode } from './status';
export { STREAMED_CHUNK_BYTES, IMMEDIATE_DETAILS, INTERNAL_ERROR_DETAILS } from './responses';
export { DEFAULT_MAX_REQUEST_HEADERS, MAX_FORWARD_ADDED_HEADERS } from './header-budget';
