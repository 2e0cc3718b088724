/** A local image host on 127.0.0.1 for media-download tests, with the misbehaviours tests need. */
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { gzipSync } from 'node:zlib';
import type { Dialer, DialTarget } from '../../../../src/steps/media/network';
import { tcpDial } from '../../../../src/steps/media/network';

/** A tiny valid PNG (1x1), so inlined data is recognisable. */
export const PNG_BYTES = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
);

export type Route = (req: IncomingMessage, res: ServerResponse) => void;

export class ImageServer {
  /** Paths requested, in order. */
  readonly hits: string[] = [];
  /** Remote addresses of accepted connections. */
  readonly connections: string[] = [];
  private readonly routes = new Map<string, Route>();
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  /** Requests in flight right now, and the most ever seen at once. */
  inFlight = 0;
  maxInFlight = 0;

  async start(host = '127.0.0.1'): Promise<this> {
    this.server = createServer((req, res) => {
      this.hits.push(req.url ?? '');
      this.inFlight++;
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
      // 'finish' is before the client can have read the answer; 'close' covers aborted ones.
      let done = false;
      const end = (): void => {
        if (!done) this.inFlight--;
        done = true;
      };
      res.on('finish', end);
      res.on('close', end);
      const route = this.routes.get((req.url ?? '').split('?')[0]!);
      if (route) route(req, res);
      else {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not found');
      }
    });
    this.server.on('connection', (s) => {
      this.connections.push(s.remoteAddress ?? '');
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve) => this.server!.listen(0, host, resolve));
    return this;
  }

  get port(): number {
    return (this.server!.address() as AddressInfo).port;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  on(path: string, route: Route): this {
    this.routes.set(path, route);
    return this;
  }

  /** Serves `body` with `contentType` (omitted when null). */
  file(path: string, body: Buffer, contentType: string | null = 'image/png'): this {
    return this.on(path, (_req, res) => {
      const headers: Record<string, string | number> = { 'content-length': body.length };
      if (contentType !== null) headers['content-type'] = contentType;
      res.writeHead(200, headers);
      res.end(body);
    });
  }

  /** Serves `body` chunked (no Content-Length). */
  chunked(path: string, body: Buffer, contentType = 'image/png'): this {
    return this.on(path, (_req, res) => {
      res.writeHead(200, { 'content-type': contentType, 'transfer-encoding': 'chunked' });
      const step = 64 * 1024;
      for (let i = 0; i < body.length; i += step) res.write(body.subarray(i, i + step));
      res.end();
    });
  }

  gzip(path: string, body: Buffer, contentType = 'image/png'): this {
    const packed = gzipSync(body);
    return this.on(path, (_req, res) => {
      res.writeHead(200, { 'content-type': contentType, 'content-encoding': 'gzip', 'content-length': packed.length });
      res.end(packed);
    });
  }

  redirect(path: string, location: string, status = 302): this {
    return this.on(path, (_req, res) => {
      res.writeHead(status, { location });
      res.end();
    });
  }

  status(path: string, status: number): this {
    return this.on(path, (_req, res) => {
      res.writeHead(status, { 'content-type': 'text/plain' });
      res.end(`status ${status}`);
    });
  }

  /** Sends headers and never the body (for timeouts); the socket is destroyed on stop(). */
  hang(path: string): this {
    return this.on(path, (_req, res) => {
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': 100 });
      res.flushHeaders();
    });
  }

  /** Promises 1000 bytes, sends 5, then drops the connection. */
  truncated(path: string): this {
    return this.on(path, (req, res) => {
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': 1000 });
      res.write(Buffer.from('12345'), () => setTimeout(() => req.socket.destroy(), 10));
    });
  }

  /** Holds each request until `release()` or until `n` are in flight together. */
  barrier(path: string, body: Buffer, n: number): this {
    const waiting: Array<() => void> = [];
    const releaseAll = (): void => {
      for (const w of waiting.splice(0)) w();
    };
    let fallback: NodeJS.Timeout | undefined;
    return this.on(path, (_req, res) => {
      waiting.push(() => {
        res.writeHead(200, { 'content-type': 'image/png', 'content-length': body.length });
        res.end(body);
      });
      if (waiting.length >= n) {
        clearTimeout(fallback);
        releaseAll();
      } else {
        // Never deadlock a test whose code under test is not concurrent enough: let them go
        // after a while, and let the in-flight maximum tell the story.
        clearTimeout(fallback);
        fallback = setTimeout(releaseAll, 1000);
      }
    });
  }

  reset(): void {
    this.hits.length = 0;
    this.connections.length = 0;
    this.routes.clear();
    this.maxInFlight = 0;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

/**
 * A dialer that records every attempt and NEVER opens a socket: for every address that is not
 * this machine's loopback. If the guard under test were broken, the worst case is a recorded call.
 */
export class RecordingNoSocketDialer {
  readonly calls: DialTarget[] = [];
  readonly dial: Dialer = async (target) => {
    this.calls.push(target);
    throw new Error('test dialer: no sockets are opened');
  };
}

/**
 * A dialer that records every attempt and really connects, but only to a loopback address;
 * anything else is refused without a socket (so a broken guard still cannot send a packet out).
 */
export class RecordingLoopbackDialer {
  readonly calls: DialTarget[] = [];
  readonly dial: Dialer = async (target, signal) => {
    this.calls.push(target);
    if (target.ip !== '127.0.0.1' && target.ip !== '::1') throw new Error(`test dialer: refusing non-loopback ${target.ip}`);
    return tcpDial(target, signal);
  };
}

/** A resolver from a table; each name may answer differently on each lookup (DNS rebinding). */
export class ScriptedResolver {
  readonly lookups: string[] = [];
  constructor(private readonly answers: Record<string, string[][]>) {}
  readonly resolve = async (host: string): Promise<string[]> => {
    this.lookups.push(host);
    const script = this.answers[host];
    if (!script || script.length === 0) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    // The last answer repeats once the script runs out.
    return script.length > 1 ? script.shift()! : script[0]!;
  };
}
