/**
 * grpc.health.v1 `Check` on the lean transport (src/extproc/lean-health.ts): given the statuses,
 * the server answers every Check itself, and each answer is the one grpc-js's health service gives
 * for the same statuses, asked by a gRPC client as Envoy's health checker and the kubelet ask. A
 * request it does not take whole gets grpc-js's status for it too; `Watch` stays on grpc-js.
 */
import * as http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation, type ServingStatusMap } from 'grpc-health-check';
import type { ExtProcServer } from '../../src/extproc';
import { HEALTH_CHECK_PATH, type HealthLookup } from '../../src/extproc/lean-health';
import { startScriptedServer } from './harness';

const STATUSES: ServingStatusMap = { '': 'SERVING', 'envoy.service.ext_proc.v3.ExternalProcessor': 'NOT_SERVING', odd: 'UNKNOWN' };

let asked = 0;

/** A server whose grpc-js health service holds `statuses`; with `lookup`, the lean transport answers Check. */
function start(statuses: ServingStatusMap, lookup?: HealthLookup): Promise<ExtProcServer> {
  return startScriptedServer({
    configure: (s) => new HealthImplementation({ ...statuses }).addToServer(s),
    ...(lookup ? { healthCheck: lookup } : {}),
  });
}

function server(lean: boolean): Promise<ExtProcServer> {
  const map = new Map(Object.entries(STATUSES));
  return start(
    STATUSES,
    lean
      ? (name) => {
          asked++;
          return map.get(name);
        }
      : undefined,
  );
}

let lean: ExtProcServer;
let reference: ExtProcServer;
beforeAll(async () => {
  [lean, reference] = await Promise.all([server(true), server(false)]);
});
afterAll(async () => {
  await Promise.all([lean.shutdown(200), reference.shutdown(200)]);
});

/** HealthCheckRequest{service} by hand: field 1, length-delimited. */
function checkRequest(service: string): Buffer {
  const s = Buffer.from(service, 'utf8');
  const len = s.length < 0x80 ? Buffer.from([s.length]) : Buffer.from([(s.length & 0x7f) | 0x80, s.length >> 7]);
  return Buffer.concat([Buffer.from([0x0a]), len, s]);
}

interface Answer {
  readonly code: number;
  readonly details: string;
  readonly response: string | null;
}

async function check(port: number, message: Buffer): Promise<Answer> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  try {
    return await new Promise<Answer>((resolve) => {
      client.makeUnaryRequest(
        HEALTH_CHECK_PATH,
        (b: Buffer) => b,
        (b: Buffer) => b,
        message,
        (err: grpc.ServiceError | null, value?: Buffer) =>
          resolve({ code: err?.code ?? 0, details: err ? err.details : 'OK', response: value ? value.toString('hex') : null }),
      );
    });
  } finally {
    client.close();
  }
}

const CASES: Array<[string, Buffer]> = [
  ['the overall service', checkRequest('')],
  ['the ext_proc service', checkRequest('envoy.service.ext_proc.v3.ExternalProcessor')],
  ['a status of UNKNOWN', checkRequest('odd')],
  ['an unknown name', checkRequest('nobody')],
  ['a long unknown name', checkRequest('n'.repeat(300))],
  ['an empty message', Buffer.alloc(0)],
  ['an unknown field beside the name', Buffer.concat([Buffer.from([0x10, 0x05]), checkRequest('')])],
];

it.each(CASES)('Check of %s: the answer grpc-js gives, answered by the lean transport', async (_name, message) => {
  const before = asked;
  const [got, want] = await Promise.all([check(lean.port, message), check(reference.port, message)]);
  expect(got).toStrictEqual(want);
  const parsed = message.length === 0 || message[0] === 0x0a || message[0] === 0x10;
  if (parsed && want.code !== 13) expect(asked).toBe(before + 1);
});

it('the statuses are read at each Check, not copied at start', async () => {
  const map = new Map<string, 'SERVING' | 'NOT_SERVING'>([['', 'SERVING']]);
  const s = await start({}, (name) => map.get(name));
  try {
    expect((await check(s.port, checkRequest(''))).response).toBe('0801');
    map.set('', 'NOT_SERVING');
    expect((await check(s.port, checkRequest(''))).response).toBe('0802');
  } finally {
    await s.shutdown(200);
  }
});

/** Raw HTTP/2, for a compressed flag no gRPC client sends uncompressed. */
async function rawStatus(port: number, body: Buffer): Promise<string | undefined> {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  try {
    return await new Promise<string | undefined>((resolve, reject) => {
      const req = session.request({ ':method': 'POST', ':path': HEALTH_CHECK_PATH, 'content-type': 'application/grpc', te: 'trailers' });
      let status: string | undefined;
      req.on('response', (h) => (status = h['grpc-status'] as string | undefined));
      req.on('trailers', (t) => (status = t['grpc-status'] as string | undefined));
      req.on('close', () => resolve(status));
      req.on('error', reject);
      req.resume();
      req.end(body);
    });
  } finally {
    session.close();
  }
}

it('bytes that are not a HealthCheckRequest, a frame cut short, a compressed flag without an encoding: INTERNAL', async () => {
  // Here grpc-js differs, and we follow PROTOCOL-HTTP2.md: protobufjs reads a field longer than the
  // message leniently, grpc-js answers a frame cut short UNIMPLEMENTED, and lets a compressed flag
  // with no grpc-encoding pass.
  const cutField = Buffer.from([0, 0, 0, 0, 3, 0x0a, 0x50, 0x41]);
  const compressed = Buffer.concat([Buffer.from([1, 0, 0, 0, 2]), checkRequest('').subarray(0, 2)]);
  const short = Buffer.from([0, 0, 0, 0, 9, 0x0a]);
  for (const body of [cutField, compressed, short]) expect(await rawStatus(lean.port, body)).toBe('13');
});

it('Watch stays on grpc-js, beside the lean Check', async () => {
  const client = new grpc.Client(`127.0.0.1:${lean.port}`, grpc.credentials.createInsecure());
  try {
    const first = await new Promise<string>((resolve, reject) => {
      const call = client.makeServerStreamRequest(
        '/grpc.health.v1.Health/Watch',
        (b: Buffer) => b,
        (b: Buffer) => b,
        checkRequest(''),
      );
      call.on('data', (b: Buffer) => {
        resolve(b.toString('hex'));
        call.cancel();
      });
      call.on('error', (e: grpc.ServiceError) => (e.code === grpc.status.CANCELLED ? undefined : reject(e)));
    });
    expect(first).toBe('0801');
  } finally {
    client.close();
  }
});
