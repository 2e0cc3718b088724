/**
 * Loads our ext_proc .proto files (proto/ at the repository root) with the options the rest of
 * this folder relies on: field names as in the .proto, enums as names, unset fields present,
 * oneof members named by a virtual property.
 *
 * The service itself loads them only when something needs the reference codec: the fast decoder
 * meets a message it does not take (request-decoder.ts), or the fast encoder one it does not
 * write, or grpc-js serves `Process` itself (`server.transport: grpc-js`). Envoy's messages never
 * need it, and proto-loader, protobufjs and the parsed protos stay in memory for as long as the
 * process lives: with grpc-health-check (grpc-health.ts) and ioredis also left out, the idle
 * service's RSS is 7.5 MB lower (README, Memory). The first such message waits for the load, about
 * 50 ms once.
 */
import fs from 'node:fs';
import path from 'node:path';
import type * as grpc from '@grpc/grpc-js';
import type * as ProtoLoader from '@grpc/proto-loader';
import type { ProcessCodec } from './lean-call';
import { fastRequestDecoder } from './request-decoder';
import { fastResponseEncoder } from './response-encoder';
import type { ProcessingRequestIn, ProcessingResponseOut } from './wire';

/** The entry file, relative to the proto root. */
export const EXT_PROC_PROTO_FILE = 'envoy/service/ext_proc/v3/external_processor.proto';
export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';

export const PROTO_LOADER_OPTIONS: ProtoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

/**
 * Finds proto/ by walking up from this file: the same code runs from src/ (ts-jest, tsx) and from
 * dist/src/ (compiled), and proto/ is not copied into dist/.
 */
export function findProtoRoot(start: string = __dirname): string {
  let dir = start;
  for (let i = 0; i < 6; i++) {
    const candidate = path.join(dir, 'proto');
    if (fs.existsSync(path.join(candidate, EXT_PROC_PROTO_FILE))) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new Error(`cannot find proto/${EXT_PROC_PROTO_FILE} above ${start}`);
}

const cache = new Map<string, ProtoLoader.PackageDefinition>();

/** The package definition of the ext_proc service and everything it imports (cached per root). */
export function loadExtProcPackage(protoRoot: string = findProtoRoot()): ProtoLoader.PackageDefinition {
  let def = cache.get(protoRoot);
  if (!def) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded on first use: see the file's comment
    const protoLoader = require('@grpc/proto-loader') as typeof ProtoLoader;
    def = protoLoader.loadSync(EXT_PROC_PROTO_FILE, { ...PROTO_LOADER_OPTIONS, includeDirs: [protoRoot] });
    cache.set(protoRoot, def);
  }
  return def;
}

/** The service definition to pass to `grpc.Server.addService`. */
export function extProcServiceDefinition(protoRoot?: string): grpc.ServiceDefinition {
  return loadExtProcPackage(protoRoot)[EXT_PROC_SERVICE_NAME] as grpc.ServiceDefinition;
}

type ProcessMethod = grpc.MethodDefinition<ProcessingRequestIn, ProcessingResponseOut>;

/** The reference codec: proto-loader's, loaded on the first call (see the file's comment). */
function lazyReference(): ProcessMethod {
  let method: ProcessMethod | undefined;
  const load = (): ProcessMethod => (method ??= extProcServiceDefinition()['Process'] as ProcessMethod);
  return {
    path: `/${EXT_PROC_SERVICE_NAME}/Process`,
    requestStream: true,
    responseStream: true,
    originalName: 'process',
    requestSerialize: (m) => load().requestSerialize(m),
    requestDeserialize: (b) => load().requestDeserialize(b),
    responseSerialize: (m) => load().responseSerialize(m),
    responseDeserialize: (b) => load().responseDeserialize(b),
  };
}

/**
 * The service definition the server registers with grpc-js: `Process` with the reference codec,
 * loaded when grpc-js first calls it (never, while the lean transport carries `Process`).
 */
export function serverServiceDefinition(): grpc.ServiceDefinition {
  return { Process: lazyReference() as grpc.MethodDefinition<object, object> };
}

/**
 * The `Process` messages' codec for the lean transport: it hands ProcessStream exactly the objects
 * grpc-js would (wire.ts). Requests go through the fast decoder (request-decoder.ts), which defers
 * to the reference deserializer for anything uncommon; responses through the fast encoder
 * (response-encoder.ts), which defers to its serializer likewise.
 */
export function processCodec(): ProcessCodec {
  const reference = lazyReference();
  return { decode: fastRequestDecoder(reference.requestDeserialize), encode: fastResponseEncoder(reference.responseSerialize) };
}
