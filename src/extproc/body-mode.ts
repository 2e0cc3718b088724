/**
 * Which request body mode a stream runs in: what Envoy announces in `protocol_config` (Envoy
 * >= 1.34, first message only), else the configured fallback.
 */
import type { Logger } from 'pino';
import type { ProtocolConfigurationIn } from './wire';

export type FallbackBodyMode = 'full_duplex' | 'buffered';

/**
 * - `full_duplex`: FULL_DUPLEX_STREAMED; the headers reply is held until the body is processed.
 * - `buffered`: BUFFERED; the whole body arrives in one message.
 * - `unsupported`: STREAMED, BUFFERED_PARTIAL, NONE, GRPC. None of them lets a body-dependent
 *   header mutation reach the request (STREAMED and BUFFERED_PARTIAL apply header mutations only in
 *   the headers reply, which Envoy needs before it sends the body; NONE sends no body). Such streams
 *   are answered pass-through, except requests without a body, which are processed normally.
 */
export type BodyMode = FallbackBodyMode | 'unsupported';

export interface StreamModes {
  readonly request: BodyMode;
  /** The announced request body mode name, or `fallback`, for logs. */
  readonly requestName: string;
  /** Response bodies come as FULL_DUPLEX_STREAMED chunks and must be echoed, not acknowledged. */
  readonly responseFullDuplex: boolean;
  /** Envoy sent `protocol_config` (>= 1.34): the modes are known, not assumed from config. */
  readonly announced: boolean;
}

export function resolveModes(config: ProtocolConfigurationIn | null | undefined, fallback: FallbackBodyMode): StreamModes {
  if (!config) return { request: fallback, requestName: `fallback:${fallback}`, responseFullDuplex: false, announced: false };
  const name = String(config.request_body_mode);
  const request: BodyMode = name === 'FULL_DUPLEX_STREAMED' ? 'full_duplex' : name === 'BUFFERED' ? 'buffered' : 'unsupported';
  return {
    request,
    requestName: name,
    responseFullDuplex: String(config.response_body_mode) === 'FULL_DUPLEX_STREAMED',
    announced: true,
  };
}

// A misconfigured filter would otherwise log on every request.
const warnedModes = new Set<string>();

/** Warns once per mode name that requests with a body pass through unprocessed. */
export function warnUnsupportedMode(log: Logger, name: string): void {
  if (warnedModes.has(name)) return;
  warnedModes.add(name);
  log.warn(
    { request_body_mode: name },
    'ext_proc request_body_mode is neither FULL_DUPLEX_STREAMED nor BUFFERED: requests with a body pass through unprocessed',
  );
}
