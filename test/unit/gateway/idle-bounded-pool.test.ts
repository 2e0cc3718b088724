/**
 * gateway/idle-bounded-pool.ts against a real local HTTP server that counts the connections it
 * sees: no cap on connections in use, at most `maxIdle` kept idle, the most recent reused first,
 * and a connection comes back however its call ended.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { collect, CollectAborted, type CollectOptions } from '../../../src/gateway/collect';
import { GO_DEFAULT_MAX_IDLE_CONNS_PER_HOST, IdleBoundedPool } from '../../../src/gateway/idle-bounded-pool';
import { REFUSED_PORT } from '../../../launch/ports';

let server: Server;
let origin: string;
const open = new Set<Socket>();
let accepted = 0;
let handler: (req: IncomingMessage, res: ServerResponse) => void = () => undefined;
const pools: IdleBoundedPool[] = [];

beforeAll(async () => {
  server = createServer((req, res) => handler(req, res));
  server.keepAliveTimeout = 60_000;
  server.on('connection', (s: Socket) => {
    accepted++;
    open.add(s);
    s.on('close', () => open.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.destroy()));
  for (const s of open) s.destroy();
  await until(() => open.size === 0);
  accepted = 0;
});

function pool(maxIdle: number, idleTimeoutMs = 60_000): IdleBoundedPool {
  const p = new IdleBoundedPool(origin, { maxIdle, idleTimeoutMs, connectTimeoutMs: 5000 });
  pools.push(p);
  return p;
}

const options = (over: Partial<CollectOptions> = {}): CollectOptions => ({
  okCap: 1 << 20,
  errorCap: 1024,
  okStatuses: [200],
  signal: new AbortController().signal,
  totalTimeoutMs: 0,
  ...over,
});
const post = { method: 'POST' as const, path: '/x', body: '{}', headers: { 'content-type': 'application/json' } };

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Answers `n` requests together: every one waits until all have arrived, so each has its own connection. */
function answerTogether(n: number): void {
  const waiting: ServerResponse[] = [];
  handler = (_req, res) => {
    waiting.push(res);
    if (waiting.length === n) for (const r of waiting.splice(0)) r.end('{"ok":true}');
  };
}

test('a burst opens a connection per call and keeps only maxIdle of them open', async () => {
  const p = pool(3);
  answerTogether(10);
  const answers = await Promise.all(Array.from({ length: 10 }, () => collect(p, post, options())));
  expect(answers.map((a) => a.status)).toEqual(Array(10).fill(200));
  expect(accepted).toBe(10);
  await until(() => open.size === 3);
  expect(p.idleCount).toBe(3);

  // The kept ones serve what follows: no new connection for calls one at a time.
  handler = (_req, res) => res.end('{}');
  for (let i = 0; i < 20; i++) expect((await collect(p, post, options())).status).toBe(200);
  expect(accepted).toBe(10);
  expect(open.size).toBe(3);
});

test('calls one after another reuse the most recently used connection', async () => {
  const p = pool(100);
  answerTogether(4);
  await Promise.all(Array.from({ length: 4 }, () => collect(p, post, options())));
  await until(() => p.idleCount === 4);
  const ports: number[] = [];
  handler = (req, res) => {
    ports.push(req.socket.remotePort!);
    res.end('{}');
  };
  for (let i = 0; i < 5; i++) {
    await collect(p, post, options());
    await until(() => p.idleCount === 4);
  }
  expect(new Set(ports).size).toBe(1);
  expect(accepted).toBe(4);
});

test('back-to-back calls use at most two connections (undici frees one a loop turn after its answer)', async () => {
  const p = pool(100);
  handler = (_req, res) => res.end('{}');
  for (let i = 0; i < 20; i++) await collect(p, post, options());
  expect(accepted).toBeLessThanOrEqual(2);
});

test("max_idle_conns_per_host 0 keeps Go's default of 2", async () => {
  const p = pool(0);
  answerTogether(6);
  await Promise.all(Array.from({ length: 6 }, () => collect(p, post, options())));
  await until(() => open.size === GO_DEFAULT_MAX_IDLE_CONNS_PER_HOST);
  expect(p.idleCount).toBe(2);
});

test('a connection comes back after an error answer, a reset, an abort and a headers timeout', async () => {
  const p = pool(1);
  handler = (_req, res) => {
    res.statusCode = 500;
    res.end('{"error":"x"}');
  };
  expect((await collect(p, post, options())).status).toBe(500);
  await until(() => p.idleCount === 1);

  handler = (req) => req.socket.destroy();
  await expect(collect(p, post, options())).rejects.toThrow();
  await until(() => p.idleCount === 1);

  const ac = new AbortController();
  handler = () => setTimeout(() => ac.abort(), 20);
  await expect(collect(p, post, options({ signal: ac.signal }))).rejects.toBeInstanceOf(CollectAborted);
  await until(() => p.idleCount === 1);

  handler = () => undefined;
  await expect(collect(p, { ...post, headersTimeout: 50 }, options())).rejects.toThrow(/timeout/i);
  await until(() => p.idleCount === 1);

  // Still one connection in the idle list, and it answers.
  handler = (_req, res) => res.end('{}');
  expect((await collect(p, post, options())).status).toBe(200);
  await until(() => p.idleCount === 1);
});

test('an idle connection the server closed is reopened on its next use', async () => {
  const p = pool(2);
  handler = (_req, res) => res.end('{}');
  await collect(p, post, options());
  await until(() => p.idleCount === 1);
  for (const s of open) s.destroy();
  await until(() => open.size === 0);
  expect((await collect(p, post, options())).status).toBe(200);
  expect(accepted).toBe(2);
});

test('idle connections close after idleTimeoutMs', async () => {
  const p = pool(5, 200);
  handler = (_req, res) => res.end('{}');
  await collect(p, post, options());
  expect(open.size).toBe(1);
  await until(() => open.size === 0, 3000);
});

test('a call refused before it is sent leaves the pool as it was', async () => {
  const p = pool(2);
  handler = (_req, res) => res.end('{}');
  await collect(p, post, options());
  await until(() => p.idleCount === 1);
  await expect(collect(p, { ...post, headers: { 'bad header': 'x' } }, options())).rejects.toThrow();
  expect(p.idleCount).toBe(1);
  expect((await collect(p, post, options())).status).toBe(200);
  expect(accepted).toBe(1);
});

test('a refused connection is not reused, and the next call connects afresh', async () => {
  const dead = new IdleBoundedPool(`http://127.0.0.1:${REFUSED_PORT}`, { maxIdle: 2, idleTimeoutMs: 1000, connectTimeoutMs: 1000 });
  pools.push(dead);
  await expect(collect(dead, post, options())).rejects.toThrow(/ECONNREFUSED/);
  await new Promise((r) => setImmediate(r));
  expect(dead.idleCount).toBe(0);
});

test('close closes the idle connections and later calls fail at once', async () => {
  const p = pool(4);
  answerTogether(3);
  await Promise.all(Array.from({ length: 3 }, () => collect(p, post, options())));
  await p.close();
  await until(() => open.size === 0);
  await expect(collect(p, post, options())).rejects.toThrow(/closed/i);
});

test('a call in flight when the pool closes still completes, and its connection is then closed', async () => {
  const p = pool(4);
  let answer: ServerResponse | undefined;
  handler = (_req, res) => (answer = res);
  const call = collect(p, post, options());
  await until(() => answer !== undefined);
  const closed = p.close();
  answer!.end('{"late":true}');
  expect((await call).body.toString()).toBe('{"late":true}');
  await closed;
  await until(() => open.size === 0);
});
