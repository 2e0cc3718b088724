/**
 * gateway/collect.ts: an answer read whole over undici's dispatch API, against a real local HTTP
 * server. Each way a call can end settles it once, and what we stop is not read further.
 */
import { getEventListeners } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { collect, CollectAborted, findHeader, type CollectOptions } from '../../../src/gateway/collect';

let server: Server;
let base: string;
const seen: string[] = [];
let handler: (req: IncomingMessage, res: ServerResponse) => void = () => undefined;

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push(req.url ?? '');
    handler(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));
beforeEach(() => (seen.length = 0));

const options = (over: Partial<CollectOptions> = {}): CollectOptions => ({
  okCap: 1024,
  errorCap: 16,
  okStatuses: [200],
  signal: new AbortController().signal,
  totalTimeoutMs: 0,
  ...over,
});
const post = (path: string) => ({ method: 'POST' as const, path, body: '{}', headers: { 'content-type': 'application/json' } });

test('a whole answer: status, headers and the body in one buffer', async () => {
  handler = (_req, res) => {
    res.setHeader('x-answer', 'yes');
    res.write('{"a":');
    setTimeout(() => res.end('1}'), 10);
  };
  const pool = new Pool(base);
  const got = await collect(pool, post('/ok'), options());
  expect(got).toMatchObject({ status: 200, over: false });
  expect(findHeader(got.rawHeaders, 'x-answer')).toBe('yes');
  expect(got.body.toString()).toBe('{"a":1}');
  await pool.close();
});

test('answer headers by lower-case name, whatever case they came in, the first value of a repeated one', async () => {
  handler = (_req, res) => {
    // Raw header lines, in the case and order a worker might send them.
    res.writeHead(200, ['X-Peer-Topology', 'first', 'x-peer-topology', 'second', 'Content-Type', 'application/json', 'X-Peer', 'short']);
    res.end('{}');
  };
  const pool = new Pool(base);
  const got = await collect(pool, post('/headers'), options());
  expect(findHeader(got.rawHeaders, 'x-peer-topology')).toBe('first');
  expect(findHeader(got.rawHeaders, 'content-type')).toBe('application/json');
  expect(findHeader(got.rawHeaders, 'x-peer')).toBe('short');
  // A name is matched whole: neither a prefix nor a longer name of the same start.
  expect(findHeader(got.rawHeaders, 'x-peer-topolog')).toBeUndefined();
  expect(findHeader(got.rawHeaders, 'x-peer-topologyy')).toBeUndefined();
  expect(findHeader(got.rawHeaders, 'x-missing')).toBeUndefined();
  await pool.close();
});

test('a value is read as the bytes sent (latin1), never re-interpreted', () => {
  const raw = [Buffer.from('X-Revision'), Buffer.from([0x72, 0xe9, 0x76])];
  expect(findHeader(raw, 'x-revision')).toBe('r\u00e9v');
  // Only ASCII letters fold: 0xC9 is not an upper-case 0xE9.
  expect(findHeader([Buffer.from([0x78, 0xc9]), Buffer.from('v')], 'x\u00e9')).toBeUndefined();
});

test('a success over its cap stops at the cap, and the rest is not read', async () => {
  let closed = false;
  handler = (req, res) => {
    req.socket.on('close', () => (closed = true));
    res.write('x'.repeat(2000));
    // Never ends on its own: only our stop ends this connection.
  };
  const pool = new Pool(base);
  const got = await collect(pool, post('/big'), options());
  expect(got).toMatchObject({ status: 200, over: true });
  expect(got.body.length).toBe(1024);
  await new Promise((r) => setTimeout(r, 100));
  expect(closed).toBe(true);
  await pool.destroy();
});

test('an error answer is read up to the error cap only', async () => {
  handler = (_req, res) => {
    res.statusCode = 500;
    res.end('e'.repeat(100));
  };
  const pool = new Pool(base);
  const got = await collect(pool, post('/err'), options());
  expect(got).toMatchObject({ status: 500, over: true });
  expect(got.body.toString()).toBe('e'.repeat(16));
  await pool.destroy();
});

test('the total deadline ends a trickling answer as a timeout', async () => {
  handler = (_req, res) => {
    const t = setInterval(() => res.write('.'), 20);
    res.on('close', () => clearInterval(t));
  };
  const pool = new Pool(base);
  const err = await collect(pool, post('/slow'), options({ totalTimeoutMs: 150 })).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(CollectAborted);
  expect((err as CollectAborted).why).toBe('timeout');
  await pool.destroy();
});

test("the caller's abort while the call waits in the pool: it settles at once and never goes out", async () => {
  handler = () => undefined; // holds the only connection
  const pool = new Pool(base, { connections: 1 });
  const first = collect(pool, post('/hold'), options()).catch((e: unknown) => e);
  await new Promise((r) => setTimeout(r, 50));
  const caller = new AbortController();
  const queued = collect(pool, post('/queued'), options({ signal: caller.signal })).catch((e: unknown) => e);
  caller.abort();
  const err = await queued;
  expect(err).toBeInstanceOf(CollectAborted);
  expect((err as CollectAborted).why).toBe('cancelled');
  await pool.destroy();
  await first;
  expect(seen).toEqual(['/hold']);
});

test('an already aborted signal: no request at all', async () => {
  const pool = new Pool(base);
  const caller = new AbortController();
  caller.abort();
  await expect(collect(pool, post('/never'), options({ signal: caller.signal }))).rejects.toBeInstanceOf(CollectAborted);
  expect(seen).toEqual([]);
  await pool.close();
});

test('one abort stops every call in flight on the signal, and calls on a long-lived signal add one listener, not one each', async () => {
  const pool = new Pool(base);
  const caller = new AbortController();
  handler = (_req, res) => res.end('{}');
  for (let i = 0; i < 5; i++) expect((await collect(pool, post('/quick'), options({ signal: caller.signal }))).status).toBe(200);
  expect(getEventListeners(caller.signal, 'abort')).toHaveLength(1);
  handler = () => undefined; // both held until the abort
  const held = [
    collect(pool, post('/held-1'), options({ signal: caller.signal })).catch((e: unknown) => e),
    collect(pool, post('/held-2'), options({ signal: caller.signal })).catch((e: unknown) => e),
  ];
  await new Promise((r) => setTimeout(r, 50));
  caller.abort();
  for (const err of await Promise.all(held)) expect((err as CollectAborted).why).toBe('cancelled');
  await pool.destroy();
});
