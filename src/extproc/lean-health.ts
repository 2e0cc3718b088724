/**
 * `grpc.health.v1.Health/Check` on the lean transport, answered from the same statuses the
 * grpc-js health service holds.
 *
 * Why: Envoy checks the service every two seconds (launch/envoy-policy.ts, SERVICE_HEALTH_CHECK) and
 * the kubelet every few. On grpc-js each check is a unary call through all of its machinery, run
 * too rarely for V8 to optimise: with no traffic it was about 40 % of the service's own CPU (perf,
 * 3.2 ms a second at idle), which a replica pays around the clock and which a low-traffic
 * replica pays per request. `Watch`, `List` and every other method stay on grpc-js.
 *
 * The answers are those of the health service on grpc-js (grpc-health.ts): the status for a known
 * service name, NOT_FOUND ("Health status unknown for service <name>") for any other. A request
 * this file does not take whole (an encoding, a compressed or oversize message, bytes that are not
 * a HealthCheckRequest) gets the status grpc-js would give it.
 */
import type * as http2 from 'node:http2';
import { FRAME_HEADER_BYTES, frameMessage } from './grpc-framing';
import { decodeCheckRequest, encodeCheckResponse, SERVING_STATUS, type ServingStatus } from './grpc-health';

export const HEALTH_CHECK_PATH = '/grpc.health.v1.Health/Check';

/** A service's status as the health service holds it, or undefined for an unknown name. */
export type HealthLookup = (service: string) => ServingStatus | undefined;

/** A service name is short; anything longer is not a health check. */
const MAX_REQUEST_BYTES = 1024;
const NOT_FOUND = 5;
const INTERNAL = 13;
const RESOURCE_EXHAUSTED = 8;

const RESPONSE_HEADERS = Object.freeze({ ':status': 200, 'content-type': 'application/grpc', 'grpc-accept-encoding': 'identity' });
// No `date` header (gRPC has no use for it): Node's cached date also arms a timer each second, one
// more wake-up of an idle service.
const ANSWER = Object.freeze({ waitForTrailers: true, sendDate: false });
const FAILURE = Object.freeze({ endStream: true, sendDate: false });
const OK_TRAILERS = Object.freeze({ 'grpc-status': '0', 'grpc-message': 'OK' });
/** Each status's HealthCheckResponse as the grpc-js health service encodes it (grpc-health.ts), framed. */
const ANSWERS = Object.fromEntries(
  (Object.keys(SERVING_STATUS) as ServingStatus[]).map((name) => [name, frameMessage(encodeCheckResponse({ status: name }))]),
) as Record<ServingStatus, Buffer>;

/** True when this file takes the stream (an identity-encoded gRPC request). */
export function isLeanHealthCheck(headers: http2.IncomingHttpHeaders): boolean {
  const encoding = headers['grpc-encoding'];
  return headers[':path'] === HEALTH_CHECK_PATH && (encoding === undefined || encoding === 'identity');
}

export function serveHealthCheck(stream: http2.ServerHttp2Stream, lookup: HealthLookup): void {
  const parts: Buffer[] = [];
  let size = 0;
  let done = false;
  const fail = (code: number, message: string): void => {
    done = true;
    try {
      stream.respond({ ...RESPONSE_HEADERS, 'grpc-status': String(code), 'grpc-message': encodeURI(message) }, FAILURE);
    } catch {
      // reset meanwhile
    }
  };
  stream.on('data', (chunk: Buffer) => {
    if (done) return;
    size += chunk.length;
    if (size > FRAME_HEADER_BYTES + MAX_REQUEST_BYTES) fail(RESOURCE_EXHAUSTED, 'Received message larger than max');
    else parts.push(chunk);
  });
  stream.on('end', () => {
    if (done) return;
    const service = serviceOf(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size));
    if (service === undefined) return fail(INTERNAL, 'Error deserializing request');
    const status = lookup(service);
    if (status === undefined) return fail(NOT_FOUND, `Health status unknown for service ${service}`);
    done = true;
    try {
      stream.respond(RESPONSE_HEADERS, ANSWER);
      stream.once('wantTrailers', () => {
        try {
          stream.sendTrailers(OK_TRAILERS);
        } catch {
          // reset meanwhile
        }
      });
      stream.end(ANSWERS[status]);
    } catch {
      // reset meanwhile
    }
  });
}

/** The `service` of one uncompressed HealthCheckRequest message, or undefined. */
function serviceOf(frame: Buffer): string | undefined {
  if (frame.length < FRAME_HEADER_BYTES || frame[0] !== 0) return undefined;
  if (frame.length !== FRAME_HEADER_BYTES + frame.readUInt32BE(1)) return undefined;
  try {
    return decodeCheckRequest(frame.subarray(FRAME_HEADER_BYTES)).service;
  } catch {
    return undefined;
  }
}
