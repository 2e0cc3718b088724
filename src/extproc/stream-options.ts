/** What every {@link ProcessStream} of one server shares (built once by server.ts). */
import type { Logger } from 'pino';
import type { RequestHandler } from '../pipeline/decision';
import type { FallbackBodyMode } from './body-mode';

export interface ProcessStreamOptions {
  readonly handler: RequestHandler;
  /** The single dynamic-metadata namespace everything is published under. */
  readonly metadataNamespace: string;
  readonly fallbackBodyMode: FallbackBodyMode;
  readonly log: Logger;
  /**
   * The server-wide body limit. An exchange's own `maxBodyBytes` applies below it; above it a
   * FULL_DUPLEX body is never accumulated, whatever the exchange says.
   */
  readonly maxBodyBytes: number;
  /** The largest body we put into one message (immediate response, BUFFERED body reply). */
  readonly maxResponseBodyBytes: number;
  /**
   * Relay streamed `respond` bodies with a streamed_immediate_response when Envoy announced
   * FULL_DUPLEX_STREAMED (Envoy >= 1.37). Default true; false collects them (Envoy 1.34-1.36).
   */
  readonly streamedResponses?: boolean;
  /**
   * Ends a stream on which Envoy sent nothing for this long while we wait on it (before the request
   * is complete); 0 or absent = never. See {@link ProcessStream} (idle deadline).
   */
  readonly streamIdleTimeoutMs?: number;
  /**
   * Envoy's header-count limit (the listener's max_headers_count); a request with no room left for
   * our headers is flagged on its head (header-budget.ts). 0 or absent = no check.
   */
  readonly maxRequestHeaders?: number;
  /** Told the kind of every message Envoy sends (metrics); absent = not counted. */
  readonly received?: (message: string) => void;
}
