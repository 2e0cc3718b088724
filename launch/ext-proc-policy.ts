/**
 * How every gateway we ship calls the service, in one place: the ext_proc processing mode, the
 * timeouts, failure handling and the dynamic-metadata namespace. envoy/, config/k8s, the chart,
 * config/istio and config/gke express these in their own terms; a test
 * (test/deploy/manifests/gateway-policy-parity.test.ts) reads each back into this shape. The Envoy
 * settings around the service (graceful close, health check, worker retries) are
 * launch/envoy-policy.ts's.
 */

/** Envoy's ext_proc ProcessingMode, as the filter config spells it. */
export interface ProcessingModePolicy {
  readonly requestHeaders: 'SEND' | 'SKIP';
  readonly requestBody: 'FULL_DUPLEX_STREAMED' | 'BUFFERED' | 'STREAMED' | 'NONE';
  readonly requestTrailers: 'SEND' | 'SKIP';
  readonly responseHeaders: 'SEND' | 'SKIP';
  readonly responseBody: 'FULL_DUPLEX_STREAMED' | 'BUFFERED' | 'STREAMED' | 'NONE';
  readonly responseTrailers: 'SEND' | 'SKIP';
}

export interface ExtProcPolicy {
  readonly mode: ProcessingModePolicy;
  /** Buffered mode's one wait for the whole pipeline; full duplex has no message timer. */
  readonly messageTimeoutSeconds: number;
  /** A request that skipped the pipeline would reach decode unprepared. */
  readonly failClosed: true;
  /** The client's status when the service cannot be reached (retryable "unavailable"). */
  readonly statusOnError: number;
  /** `server.metadata_namespace`'s default: the only namespace the filter accepts metadata in. */
  readonly metadataNamespace: string;
  /** No bytes move while the pipeline runs; this must outlast it and any pause in a stream. */
  readonly streamIdleTimeoutSeconds: number;
}

export const EXT_PROC_POLICY: ExtProcPolicy = {
  // The request in, the model's answer straight to the client.
  mode: {
    requestHeaders: 'SEND',
    requestBody: 'FULL_DUPLEX_STREAMED',
    requestTrailers: 'SEND',
    responseHeaders: 'SKIP',
    responseBody: 'NONE',
    responseTrailers: 'SKIP',
  },
  messageTimeoutSeconds: 600,
  failClosed: true,
  statusOnError: 503,
  metadataNamespace: 'epd.coordinator',
  streamIdleTimeoutSeconds: 600,
};

/** {@link EXT_PROC_POLICY}'s processing mode as Envoy's filter config spells it. */
export function envoyProcessingMode(mode: ProcessingModePolicy = EXT_PROC_POLICY.mode): Record<string, string> {
  return {
    request_header_mode: mode.requestHeaders,
    request_body_mode: mode.requestBody,
    request_trailer_mode: mode.requestTrailers,
    response_header_mode: mode.responseHeaders,
    response_body_mode: mode.responseBody,
    response_trailer_mode: mode.responseTrailers,
  };
}
