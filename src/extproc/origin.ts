/**
 * Which Envoy entry a `Process` stream serves, from the stream's gRPC metadata.
 *
 * An ext_proc filter can add fixed metadata to every stream it opens (`grpc_service.initial_metadata`).
 * envoy/'s `async` listener, the one only the async processor reaches, adds
 * `x-epd-origin: async-processor`. That is metadata on our gRPC call, not an HTTP header of the
 * request: a client of the public listener cannot set it (what a client sends arrives inside the
 * protocol messages). The pipeline only learns the origin's name (RequestHead.origin).
 */
import type { CallMetadata } from './outbound';

export const ORIGIN_METADATA_KEY = 'x-epd-origin';

/** An origin name as configured: short, lower-case; anything else counts as no origin. */
const ORIGIN_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** The stream's origin, or undefined (the public entry, or a value that is not a plain name). */
export function streamOrigin(call: { readonly metadata?: CallMetadata }): string | undefined {
  const values = call.metadata?.get(ORIGIN_METADATA_KEY);
  // Several values would be a misconfigured filter: trust none of them.
  if (!values || values.length !== 1) return undefined;
  const v = values[0];
  return typeof v === 'string' && ORIGIN_NAME.test(v) ? v : undefined;
}
