/**
 * `grpc.health.v1.Health` for grpc-js (Check, Watch, List), its four messages encoded by hand.
 *
 * Why not grpc-health-check: it loads its .proto through proto-loader and protobufjs when it is
 * imported, and nothing else of a running service needs them (the lean transport has its own ext_proc
 * codec, proto.ts loads the reference one on first use). Without them the service starts with less
 * heap and RSS (README, Memory). The answers are the library's: the status of a known service,
 * NOT_FOUND ("Health status unknown for service <name>") for another; Watch sends the current status
 * (SERVICE_UNKNOWN for an unknown name) and then every change; List refuses more than 100 services.
 * The protocol tests drive it with the library's own client definition.
 */
import type * as grpc from '@grpc/grpc-js';

export const HEALTH_SERVICE = 'grpc.health.v1.Health';

/** HealthCheckResponse.ServingStatus */
export const SERVING_STATUS = { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 } as const;
type WireStatus = keyof typeof SERVING_STATUS;
/** What a service can be set to: SERVICE_UNKNOWN is only what Watch says of a name without one. */
export type ServingStatus = Exclude<WireStatus, 'SERVICE_UNKNOWN'>;
const STATUS_NAMES = Object.keys(SERVING_STATUS) as WireStatus[];

const NOT_FOUND = 5;
const RESOURCE_EXHAUSTED = 8;
/** grpc-health-check's bound on a List answer. */
const MAX_LISTED = 100;

interface CheckRequest {
  readonly service: string;
}
interface CheckResponse {
  readonly status: WireStatus;
}
interface ListResponse {
  readonly statuses: Readonly<Record<string, CheckResponse>>;
}

/** A varint at `at.i` (at most 5 bytes, as every length and tag here is), or undefined. */
function varint(buf: Buffer, at: { i: number }): number | undefined {
  let value = 0;
  for (let shift = 0; shift < 35; shift += 7) {
    const b = buf[at.i++];
    if (b === undefined) return undefined;
    value += (b & 0x7f) * 2 ** shift;
    if (b < 0x80) return value;
  }
  return undefined;
}

/**
 * Walks the fields of one message, calling `field` with each varint or length-delimited one;
 * false when the bytes are not a message (a wire type proto3 gave up, or a field past the end).
 */
function eachField(buf: Buffer, field: (tag: number, value: number, start: number) => void): boolean {
  const at = { i: 0 };
  while (at.i < buf.length) {
    const tag = varint(buf, at);
    if (tag === undefined) return false;
    const wire = tag & 7;
    if (wire === 0) {
      const v = varint(buf, at);
      if (v === undefined) return false;
      field(tag, v, -1);
    } else if (wire === 2) {
      const n = varint(buf, at);
      if (n === undefined || at.i + n > buf.length) return false;
      field(tag, n, at.i);
      at.i += n;
    } else if (wire === 1 || wire === 5) {
      at.i += wire === 1 ? 8 : 4;
      if (at.i > buf.length) return false;
    } else return false;
  }
  return true;
}

/** HealthCheckRequest: `service` (field 1); other fields are skipped, as protobuf does. */
export function decodeCheckRequest(buf: Buffer): CheckRequest {
  let service = '';
  const ok = eachField(buf, (tag, n, start) => {
    if (tag === 0x0a) service = buf.toString('utf8', start, start + n);
  });
  if (!ok) throw new Error('not a grpc.health.v1.HealthCheckRequest');
  return { service };
}

function encodeCheckRequest(req: CheckRequest): Buffer {
  const name = Buffer.from(req.service ?? '', 'utf8');
  return name.length === 0 ? Buffer.alloc(0) : Buffer.concat([lengthPrefixed(0x0a, name.length), name]);
}

/**
 * HealthCheckResponse: `status` (field 1, a varint), written even when it is UNKNOWN (0), as
 * protobufjs writes a field that is set (and the lean Check answers, lean-health.ts).
 */
export function encodeCheckResponse(res: CheckResponse): Buffer {
  return Buffer.from([0x08, SERVING_STATUS[res.status] ?? 0]);
}

function decodeCheckResponse(buf: Buffer): CheckResponse {
  let status: WireStatus = 'UNKNOWN';
  if (!eachField(buf, (tag, v) => tag === 0x08 && (status = STATUS_NAMES[v] ?? 'UNKNOWN')))
    throw new Error('not a grpc.health.v1.HealthCheckResponse');
  return { status };
}

/** A field's tag (one byte here) and its length as a varint. */
function lengthPrefixed(tag: number, length: number): Buffer {
  const bytes = [tag];
  for (; length >= 0x80; length = Math.floor(length / 0x80)) bytes.push((length & 0x7f) | 0x80);
  bytes.push(length);
  return Buffer.from(bytes);
}

/** HealthListResponse: `statuses` (field 1), a map: one entry message per service (key 1, value 2). */
function encodeListResponse(res: ListResponse): Buffer {
  const parts: Buffer[] = [];
  for (const [service, value] of Object.entries(res.statuses)) {
    const key = Buffer.from(service, 'utf8');
    const status = encodeCheckResponse(value);
    const entry = Buffer.concat([lengthPrefixed(0x0a, key.length), key, lengthPrefixed(0x12, status.length), status]);
    parts.push(lengthPrefixed(0x0a, entry.length), entry);
  }
  return Buffer.concat(parts);
}

const EMPTY = Buffer.alloc(0);
const unsupported = (): never => {
  throw new Error('not used by a grpc.health.v1 server');
};

function method(name: string, responseStream: boolean, response: (m: never) => Buffer): grpc.MethodDefinition<object, object> {
  return {
    path: `/${HEALTH_SERVICE}/${name}`,
    requestStream: false,
    responseStream,
    originalName: name.toLowerCase(),
    requestSerialize: name === 'List' ? () => EMPTY : (m: object) => encodeCheckRequest(m as CheckRequest),
    requestDeserialize: name === 'List' ? () => ({}) : decodeCheckRequest,
    responseSerialize: response as (m: object) => Buffer,
    responseDeserialize: name === 'List' ? unsupported : decodeCheckResponse,
  };
}

/** The service definition grpc-js serves (and a client can call, but for List). */
export const HEALTH_SERVICE_DEFINITION: grpc.ServiceDefinition = {
  Check: method('Check', false, encodeCheckResponse),
  Watch: method('Watch', true, encodeCheckResponse),
  List: method('List', false, encodeListResponse),
};

/** The statuses, and the Health service on a grpc-js server that answers from them. */
export class HealthStatuses {
  private readonly statuses = new Map<string, ServingStatus>();
  private readonly watchers = new Map<string, Set<(status: ServingStatus) => void>>();

  constructor(initial: Readonly<Record<string, ServingStatus>>) {
    for (const [service, status] of Object.entries(initial)) this.statuses.set(service, status);
  }

  /** The service names with a status, in the order they were first set. */
  services(): string[] {
    return [...this.statuses.keys()];
  }

  get(service: string): ServingStatus | undefined {
    return this.statuses.get(service);
  }

  set(service: string, status: ServingStatus): void {
    this.statuses.set(service, status);
    for (const watcher of this.watchers.get(service) ?? []) watcher(status);
  }

  addTo(server: grpc.Server): void {
    server.addService(HEALTH_SERVICE_DEFINITION, {
      check: (call: grpc.ServerUnaryCall<CheckRequest, CheckResponse>, callback: grpc.sendUnaryData<CheckResponse>) => {
        const status = this.statuses.get(call.request.service);
        if (status) callback(null, { status });
        else callback({ code: NOT_FOUND, details: `Health status unknown for service ${call.request.service}` });
      },
      watch: (call: grpc.ServerWritableStream<CheckRequest, CheckResponse>) => this.watch(call),
      list: (_call: grpc.ServerUnaryCall<object, ListResponse>, callback: grpc.sendUnaryData<ListResponse>) => {
        if (this.statuses.size > MAX_LISTED) return callback({ code: RESOURCE_EXHAUSTED, details: 'Too many services to list.' });
        const statuses: Record<string, CheckResponse> = {};
        for (const [service, status] of this.statuses) statuses[service] = { status };
        callback(null, { statuses });
      },
    });
  }

  private watch(call: grpc.ServerWritableStream<CheckRequest, CheckResponse>): void {
    const service = call.request.service;
    const watcher = (status: ServingStatus): void => void call.write({ status });
    let set = this.watchers.get(service);
    if (!set) this.watchers.set(service, (set = new Set()));
    set.add(watcher);
    call.on('cancelled', () => {
      set.delete(watcher);
      if (set.size === 0 && this.watchers.get(service) === set) this.watchers.delete(service);
    });
    call.write({ status: this.statuses.get(service) ?? 'SERVICE_UNKNOWN' });
  }
}
