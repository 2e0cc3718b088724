/**
 * Side-call and download deadlines fire even when the garbage collector runs while they wait.
 * (On Node 20, AbortSignal.any over AbortSignal.timeout loses the timeout to a collection; a CI run
 * saw a prefill trickling its body for 6 s answered 200 instead of being cut off at 2 s.)
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { PooledSideCallClient } from '../../../src/gateway/client';
import { deadline } from '../../../src/pipeline/deadline';
import { CancelledError, TransportError } from '../../../src/pipeline/errors';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Runs a full collection every 10 ms while `run` is pending. */
async function underGcPressure<T>(run: () => Promise<T>): Promise<T> {
  const timer = setInterval(gc, 10);
  try {
    return await run();
  } finally {
    clearInterval(timer);
  }
}

describe('deadline', () => {
  it('aborts with a TimeoutError once the time has passed, even across collections', async () => {
    const parent = new AbortController();
    const fired = await underGcPressure(
      () =>
        new Promise<unknown>((resolve) => {
          // Only the listener's closure refers to the signal, as when a client library holds it.
          deadline(parent.signal, 100).signal.addEventListener('abort', function (this: AbortSignal) {
            resolve(this.reason);
          });
          setTimeout(() => resolve('never fired'), 1000);
        }),
    );
    expect(fired).toBeInstanceOf(DOMException);
    expect((fired as DOMException).name).toBe('TimeoutError');
  });

  it('follows the parent, and says the time did not run out', () => {
    const parent = new AbortController();
    const d = deadline(parent.signal, 60_000);
    parent.abort(new Error('client gone'));
    expect(d.signal.aborted).toBe(true);
    expect((d.signal.reason as Error).message).toBe('client gone');
    expect(d.timedOut).toBe(false);
  });

  it('is aborted at once when the parent already is', () => {
    const parent = new AbortController();
    parent.abort();
    expect(deadline(parent.signal, 60_000).signal.aborted).toBe(true);
  });

  it('never fires once disposed', async () => {
    const d = deadline(new AbortController().signal, 20);
    d.dispose();
    await new Promise((r) => setTimeout(r, 60));
    expect(d.signal.aborted).toBe(false);
    expect(d.timedOut).toBe(false);
  });
});

describe('a side call with a total bound', () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    // Headers at once, then one byte every 100 ms for 3 s: only the total bound can end it.
    server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '30' });
      let sent = 0;
      const tick = setInterval(() => {
        if (res.destroyed || sent === 30) return clearInterval(tick);
        res.write(' ');
        sent += 1;
        if (sent === 30) res.end();
      }, 100);
      res.on('close', () => clearInterval(tick));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('is cut off with a timeout when the body trickles past it, even across collections', async () => {
    const client = new PooledSideCallClient(url, { maxIdleConns: 1, idleTimeoutMs: 1000 });
    try {
      const err = await underGcPressure(() =>
        client
          .post('/v1/completions', {}, '{}', {
            step: 'prefill',
            signal: new AbortController().signal,
            headersTimeoutMs: 300,
            totalTimeoutMs: 400,
          })
          .catch((e: unknown) => e),
      );
      expect(err).toBeInstanceOf(TransportError);
      expect((err as TransportError).timedOut).toBe(true);
    } finally {
      await client.close();
    }
  });

  it('still ends as cancelled when the client goes away first', async () => {
    const client = new PooledSideCallClient(url, { maxIdleConns: 1, idleTimeoutMs: 1000 });
    try {
      const parent = new AbortController();
      setTimeout(() => parent.abort(), 100);
      const err = await client
        .post('/v1/completions', {}, '{}', { step: 'prefill', signal: parent.signal, totalTimeoutMs: 5000 })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CancelledError);
    } finally {
      await client.close();
    }
  });

  it('keeps a streamed body bounded by the total as well', async () => {
    const client = new PooledSideCallClient(url, { maxIdleConns: 1, idleTimeoutMs: 1000 });
    try {
      const res = await client.postStreaming('/v1/completions', {}, '{}', {
        step: 'prefill',
        signal: new AbortController().signal,
        totalTimeoutMs: 400,
      });
      const outcome = await underGcPressure(async () => {
        try {
          for await (const _ of res.body) {
            // trickles
          }
          return 'read to the end';
        } catch {
          return 'cut off';
        }
      });
      expect(outcome).toBe('cut off');
    } finally {
      await client.close();
    }
  });
});
