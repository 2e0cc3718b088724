/**
 * Limits that end a whole HTTP/2 session of the ext_proc listener (and so fail every stream on it),
 * seen by a raw HTTP/2 client as Envoy would be: the session must outlive what Envoy does by design.
 *
 * - Envoy resets every ext_proc stream when its filter is done with it. With Node's stream-reset
 *   budget (1000, refilled at 33/s) the session is closed after about 1000 resets; with ours
 *   (server.stream_reset_burst / stream_reset_rate) it takes 5,000 resets as fast as they come.
 * - Concurrent streams: the listener advertises no practical SETTINGS_MAX_CONCURRENT_STREAMS, so the
 *   session never refuses a stream (Node ends a session after 100 refused streams).
 * - Pings: a peer that pings a lot (while reading our ACKs, as Envoy does) keeps its session.
 * docs/hardening.md ("Per-session limits of the ext_proc listener") lists the rest.
 */
import * as http2 from 'node:http2';
import type { ExtProcServer } from '../../src/extproc';
import { DEFAULT_SESSION_LIMITS, type SessionLimits } from '../../src/extproc/session-limits';
import { startScriptedServer } from './harness';

const PROCESS_PATH = '/envoy.service.ext_proc.v3.ExternalProcessor/Process';
const RESETS = 5000;
const BATCH = 250;

async function startServer(sessionLimits?: SessionLimits): Promise<ExtProcServer> {
  return startScriptedServer(sessionLimits ? { sessionLimits } : {});
}

interface Watched {
  readonly session: http2.ClientHttp2Session;
  /** Set once the server sent GOAWAY or the session ended. */
  ended(): string | undefined;
}

async function connect(port: number): Promise<Watched> {
  const session = http2.connect(`http://127.0.0.1:${port}`, { maxOutstandingPings: 200 });
  let why: string | undefined;
  session.on('goaway', (code: number) => (why ??= `GOAWAY ${code}`));
  session.on('close', () => (why ??= 'closed'));
  session.on('error', (err: Error) => (why ??= `error ${err.message}`));
  await new Promise<void>((resolve, reject) => {
    session.once('connect', () => resolve());
    session.once('error', reject);
  });
  return { session, ended: () => why };
}

function openProcess(session: http2.ClientHttp2Session): http2.ClientHttp2Stream {
  const stream = session.request({ ':method': 'POST', ':path': PROCESS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
  stream.on('error', () => undefined);
  return stream;
}

/** Opens and at once resets `RESETS` streams, as Envoy does when it is done with each; returns how many went out. */
async function resetStorm(w: Watched): Promise<number> {
  let sent = 0;
  while (sent < RESETS && !w.ended()) {
    const batch: Promise<void>[] = [];
    for (let i = 0; i < BATCH && !w.session.destroyed; i++) {
      const s = openProcess(w.session);
      s.close(http2.constants.NGHTTP2_CANCEL);
      batch.push(new Promise((resolve) => s.once('close', () => resolve())));
      sent++;
    }
    await Promise.all(batch);
  }
  // One round trip, so a GOAWAY sent after the last reset has arrived.
  if (!w.ended()) await new Promise<void>((resolve) => w.session.ping(() => resolve()));
  return sent;
}

/** A call after the storm still gets grpc-js's answer on the same session (UNIMPLEMENTED for a method we do not serve). */
async function sessionStillServes(w: Watched): Promise<boolean> {
  if (w.ended() || w.session.destroyed) return false;
  const s = w.session.request({ ':method': 'POST', ':path': '/no.such.Service/Call', 'content-type': 'application/grpc', te: 'trailers' });
  s.on('error', () => undefined);
  s.end();
  const grpcStatus = await new Promise<string | undefined>((resolve) => {
    s.once('response', (h) => resolve(h['grpc-status'] as string | undefined));
    s.once('close', () => resolve(undefined));
  });
  return grpcStatus === String(12) && !w.ended();
}

describe('an ext_proc HTTP/2 session', () => {
  let server: ExtProcServer;
  let nodeDefaults: ExtProcServer;
  beforeAll(async () => {
    server = await startServer();
    nodeDefaults = await startServer({ streamResetBurst: 1000, streamResetRate: 33 });
  });
  afterAll(async () => {
    await server?.shutdown(500);
    await nodeDefaults?.shutdown(500);
  });

  it(`takes ${RESETS} stream resets with the default budget (${DEFAULT_SESSION_LIMITS.streamResetBurst}, ${DEFAULT_SESSION_LIMITS.streamResetRate}/s) and still serves`, async () => {
    const w = await connect(server.port);
    try {
      const sent = await resetStorm(w);
      expect(w.ended()).toBeUndefined();
      expect(sent).toBe(RESETS);
      expect(await sessionStillServes(w)).toBe(true);
    } finally {
      w.session.destroy();
    }
  }, 60_000);

  it("is closed by the server within the storm with Node's budget (1000, 33/s): the check above can fail", async () => {
    const w = await connect(nodeDefaults.port);
    try {
      const sent = await resetStorm(w);
      expect(w.ended()).toBeDefined();
      expect(sent).toBeLessThan(RESETS);
    } finally {
      w.session.destroy();
    }
  }, 60_000);

  it('advertises no practical stream limit and accepts 2,000 concurrent streams', async () => {
    const w = await connect(server.port);
    const streams: http2.ClientHttp2Stream[] = [];
    try {
      await new Promise<void>((resolve) => w.session.ping(() => resolve()));
      // Node's default, which grpc-js keeps unless grpc.max_concurrent_streams is set.
      expect(w.session.remoteSettings.maxConcurrentStreams).toBe(2 ** 32 - 1);
      for (let i = 0; i < 2000; i++) streams.push(openProcess(w.session));
      const deadline = Date.now() + 30_000;
      while (server.activeStreams() < 2000 && Date.now() < deadline && !w.ended()) await new Promise((r) => setTimeout(r, 20));
      expect(server.activeStreams()).toBe(2000);
      expect(w.ended()).toBeUndefined();
    } finally {
      for (const s of streams) s.close(http2.constants.NGHTTP2_CANCEL);
      w.session.destroy();
    }
  }, 60_000);

  it('keeps a peer that sends 5,000 pings (reading the ACKs)', async () => {
    const w = await connect(server.port);
    try {
      for (let i = 0; i < 50; i++) {
        await Promise.all(Array.from({ length: 100 }, () => new Promise<void>((resolve) => w.session.ping(() => resolve()))));
      }
      expect(w.ended()).toBeUndefined();
      expect(await sessionStillServes(w)).toBe(true);
    } finally {
      w.session.destroy();
    }
  }, 60_000);
});
