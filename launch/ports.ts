/** Loopback port helpers for the e2e harness, the stack and the bench. */
import { createConnection, createServer } from 'node:net';

const LOOPBACK = '127.0.0.1';

/**
 * A loopback port nothing listens on, for a dead worker or service in a test: a connection is
 * refused at once. Port 1, not a freePort(): that one is free only until another process of the
 * suite is given it (a render address taken that way was answered with a 404). freePort() never
 * returns it: the kernel hands out ephemeral ports only, and nothing here binds a privileged one.
 */
export const REFUSED_PORT = 1;

/**
 * A port free on 127.0.0.1 right now. Racy by nature (another process may take it before we bind);
 * callers that hand it to a child process retry on a bind failure.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, LOOPBACK, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port > 0 ? resolve(port) : reject(new Error('no port assigned'))));
    });
  });
}

/** True when something accepts TCP connections on 127.0.0.1:port. */
export function isListening(port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ host: LOOPBACK, port });
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(timeoutMs, () => done(false));
    sock.once('connect', () => done(true));
    sock.once('error', () => done(false));
  });
}

/** True when 127.0.0.1:port can be bound by us (nothing else holds it). */
export function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen(port, LOOPBACK, () => srv.close(() => resolve(true)));
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `check` every `intervalMs` until it returns true; throws `what` after `timeoutMs`. */
export async function waitUntil(check: () => Promise<boolean> | boolean, what: string, timeoutMs: number, intervalMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}
