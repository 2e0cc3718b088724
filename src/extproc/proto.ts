/**
 * Loads our ext_proc .proto files (proto/ at the repository root) with the options the rest of
 * this folder relies on: field names as in the .proto, enums as names, unset fields present,
 * oneof members named by a virtual property.
 */
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { ProcessCodec } from './lean-call';
import { fastRequestDecoder } from './request-decoder';
import { fastResponseEncoder } from './response-encoder';
import type { ProcessingRequestIn, ProcessingResponseOut } from './wire';

/** The entry file, relative to the proto root. */
export const EXT_PROC_PROTO_FILE = 'envoy/service/ext_proc/v3/external_processor.proto';
export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';

export const PROTO_LOADER_OPTIONS: protoLoader.Options = {
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

const cache = new Map<string, protoLoader.PackageDefinition>();

/** The package definition of the ext_proc service and everything it imports (cached per root). */
export function loadExtProcPackage(protoRoot: string = findProtoRoot()): protoLoader.PackageDefinition {
  let def = cache.get(protoRoot);
  if (!def) {
    def = protoLoader.loadSync(EXT_PROC_PROTO_FILE, { ...PROTO_LOADER_OPTIONS, includeDirs: [protoRoot] });
    cache.set(protoRoot, def);
  }
  return def;
}

/** The service definition to pass to `grpc.Server.addService`. */
export function extProcServiceDefinition(protoRoot?: string): grpc.ServiceDefinition {
  return loadExtProcPackage(protoRoot)[EXT_PROC_SERVICE_NAME] as grpc.ServiceDefinition;
}

/**
 * The `Process` messages' codec for the lean transport: it hands ProcessStream exactly the objects
 * grpc-js would (wire.ts). Requests go through the fast decoder (request-decoder.ts), which defers
 * to the deserializer grpc-js is given for anything uncommon; responses through the fast encoder
 * (response-encoder.ts), which defers to that definition's serializer likewise.
 */
export function processCodec(protoRoot?: string): ProcessCodec {
  const method = extProcServiceDefinition(protoRoot)['Process'] as grpc.MethodDefinition<ProcessingRequestIn, ProcessingResponseOut>;
  return { decode: fastRequestDecoder(method.requestDeserialize), encode: fastResponseEncoder(method.responseSerialize) };
}
