/**
 * grpc.health.v1 on grpc-js (src/extproc/grpc-health.ts, the codec written by hand so that the
 * service never loads proto-loader): for the same statuses, every Check, Watch and List answer is
 * the one grpc-health-check's HealthImplementation gives, byte for byte, asked by a gRPC client
 * over the wire (Check and Watch as Envoy, the kubelet and Envoy Gateway ask; List as grpcurl).
 */
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation, service as libraryService } from 'grpc-health-check';
import { HealthStatuses, type ServingStatus } from '../../src/extproc/grpc-health';

const STATUSES: Record<string, ServingStatus> = {
  '': 'SERVING',
  'envoy.service.ext_proc.v3.ExternalProcessor': 'NOT_SERVING',
  odd: 'UNKNOWN',
  ['a'.repeat(200)]: 'SERVING',
};

interface Served {
  readonly server: grpc.Server;
  readonly port: number;
  set(service: string, status: ServingStatus): void;
}

async function serve(ours: boolean, statuses: Record<string, ServingStatus> = STATUSES): Promise<Served> {
  const server = new grpc.Server();
  let set: Served['set'];
  if (ours) {
    const h = new HealthStatuses({ ...statuses });
    h.addTo(server);
    set = (s, v) => h.set(s, v);
  } else {
    const h = new HealthImplementation({ ...statuses });
    h.addToServer(server);
    set = (s, v) => h.setStatus(s, v);
  }
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { server, port, set };
}

let ours: Served;
let library: Served;
beforeAll(async () => {
  [ours, library] = await Promise.all([serve(true), serve(false)]);
});
afterAll(() => {
  ours.server.forceShutdown();
  library.server.forceShutdown();
});

/** HealthCheckRequest{service} by hand: field 1, length-delimited. */
function checkRequest(service: string): Buffer {
  const s = Buffer.from(service, 'utf8');
  const len: number[] = [];
  let n = s.length;
  for (; n >= 0x80; n = Math.floor(n / 0x80)) len.push((n & 0x7f) | 0x80);
  len.push(n);
  return Buffer.concat([Buffer.from([0x0a]), Buffer.from(len), s]);
}

interface Answer {
  readonly code: number;
  readonly details: string;
  readonly response: string | null;
}

const raw = (b: Buffer): Buffer => b;

async function unary(port: number, method: string, message: Buffer): Promise<Answer> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  try {
    return await new Promise<Answer>((resolve) => {
      client.makeUnaryRequest(`/grpc.health.v1.Health/${method}`, raw, raw, message, (err: grpc.ServiceError | null, value?: Buffer) =>
        resolve({ code: err?.code ?? 0, details: err ? err.details : 'OK', response: value ? value.toString('hex') : null }),
      );
    });
  } finally {
    client.close();
  }
}

it.each<[string, Buffer]>([
  ['the overall service', checkRequest('')],
  ['the ext_proc service', checkRequest('envoy.service.ext_proc.v3.ExternalProcessor')],
  ['a status of UNKNOWN', checkRequest('odd')],
  ['a name longer than 127 bytes', checkRequest('a'.repeat(200))],
  ['an unknown name', checkRequest('nobody')],
  ['an empty message', Buffer.alloc(0)],
  [
    'unknown fields beside the name (varint, fixed64, fixed32)',
    Buffer.concat([Buffer.from([0x10, 0x05, 0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x25, 1, 2, 3, 4]), checkRequest('')]),
  ],
])("Check of %s: the library's answer", async (_name, message) => {
  const [got, want] = await Promise.all([unary(ours.port, 'Check', message), unary(library.port, 'Check', message)]);
  expect(got).toStrictEqual(want);
});

it('List: every status, as the library encodes it (and decodes with its own definition)', async () => {
  const [got, want] = await Promise.all([unary(ours.port, 'List', Buffer.alloc(0)), unary(library.port, 'List', Buffer.alloc(0))]);
  expect(got).toStrictEqual(want);
  const decoded = (
    libraryService['List'] as grpc.MethodDefinition<object, { statuses: Record<string, { status: string }> }>
  ).responseDeserialize(Buffer.from(got.response!, 'hex'));
  expect(Object.fromEntries(Object.entries(decoded.statuses).map(([k, v]) => [k, v.status]))).toStrictEqual(STATUSES);
});

it('a name longer than 16 KiB (a three-byte length): Check and List as the library answers them', async () => {
  const long = { ['x'.repeat(20_000)]: 'SERVING' as const };
  const [a, b] = await Promise.all([serve(true, long), serve(false, long)]);
  try {
    for (const [method, message] of [
      ['List', Buffer.alloc(0)],
      ['Check', checkRequest('x'.repeat(20_000))],
    ] as const) {
      const [got, want] = await Promise.all([unary(a.port, method, message), unary(b.port, method, message)]);
      expect(got.code).toBe(0);
      expect(got).toStrictEqual(want);
    }
  } finally {
    a.server.forceShutdown();
    b.server.forceShutdown();
  }
});

it('List of more than 100 services: RESOURCE_EXHAUSTED, as the library', async () => {
  const many = Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`svc-${i}`, 'SERVING' as const]));
  const [a, b] = await Promise.all([serve(true, many), serve(false, many)]);
  try {
    const [got, want] = await Promise.all([unary(a.port, 'List', Buffer.alloc(0)), unary(b.port, 'List', Buffer.alloc(0))]);
    expect(got.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(got).toStrictEqual(want);
  } finally {
    a.server.forceShutdown();
    b.server.forceShutdown();
  }
});

/** The first `n` messages a Watch of `service` receives, with `afterFirst` run once the first arrived. */
async function watch(s: Served, service: string, n: number, afterFirst: () => void): Promise<string[]> {
  const client = new grpc.Client(`127.0.0.1:${s.port}`, grpc.credentials.createInsecure());
  try {
    return await new Promise<string[]>((resolve, reject) => {
      const seen: string[] = [];
      const call = client.makeServerStreamRequest('/grpc.health.v1.Health/Watch', raw, raw, checkRequest(service));
      call.on('data', (b: Buffer) => {
        seen.push(b.toString('hex'));
        if (seen.length === 1) afterFirst();
        if (seen.length === n) {
          resolve(seen);
          call.cancel();
        }
      });
      call.on('error', (e: grpc.ServiceError) => (e.code === grpc.status.CANCELLED ? undefined : reject(e)));
    });
  } finally {
    client.close();
  }
}

it('Watch: the current status, then every change, as the library sends them', async () => {
  const run = (s: Served): Promise<string[]> =>
    watch(s, 'w', 3, () => {
      s.set('w', 'NOT_SERVING');
      s.set('w', 'SERVING');
    });
  const [a, b] = await Promise.all([serve(true, { w: 'SERVING' }), serve(false, { w: 'SERVING' })]);
  try {
    const [got, want] = await Promise.all([run(a), run(b)]);
    expect(got).toStrictEqual(['0801', '0802', '0801']);
    expect(got).toStrictEqual(want);
    // An unknown name: SERVICE_UNKNOWN first, then its status once it has one.
    const unknown = (s: Served): Promise<string[]> => watch(s, 'later', 2, () => s.set('later', 'SERVING'));
    const [gotUnknown, wantUnknown] = await Promise.all([unknown(a), unknown(b)]);
    expect(gotUnknown).toStrictEqual(['0803', '0801']);
    expect(gotUnknown).toStrictEqual(wantUnknown);
  } finally {
    a.server.forceShutdown();
    b.server.forceShutdown();
  }
});

it('a request that is not a HealthCheckRequest is refused, and the server goes on answering', async () => {
  const cut = Buffer.from([0x0a, 0x50, 0x41]);
  const got = await unary(ours.port, 'Check', cut);
  expect(got.code).toBe(grpc.status.INTERNAL);
  expect((await unary(ours.port, 'Check', checkRequest(''))).response).toBe('0801');
});
