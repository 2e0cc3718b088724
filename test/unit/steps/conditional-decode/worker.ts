/**
 * A scriptable HTTP worker on 127.0.0.1 for the conditional-decode tests: each test decides how the
 * answer is written (status, headers, pauses between chunks), and sees every request and every
 * connection close.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface SeenRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly json: any;
  /** Resolves when the client closed the connection before the answer was complete. */
  readonly closedEarly: Promise<void>;
}

export type Handler = (req: SeenRequest, res: ServerResponse) => Promise<void> | void;

export class ScriptedWorker {
  readonly seen: SeenRequest[] = [];
  /** TCP connections accepted so far (keep-alive reuse keeps this low). */
  connections = 0;
  handler: Handler = (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  };
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.on('connection', (s: Socket) => {
      this.connections++;
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return this;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server!.address() as AddressInfo).port}`;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k] = v;
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch {
      json = undefined;
    }
    const closedEarly = new Promise<void>((resolve) => res.once('close', () => !res.writableFinished && resolve()));
    const seen: SeenRequest = { method: req.method ?? '', path: req.url ?? '', headers, json, closedEarly };
    this.seen.push(seen);
    try {
      await this.handler(seen, res);
    } catch {
      res.destroy();
    }
  }

  reset(): void {
    this.seen.length = 0;
    this.handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    };
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Writes SSE frames with a pause before each but the first; resolves when the last is written. */
export async function writeSse(res: ServerResponse, frames: string[], pauseMs: number): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  for (let i = 0; i < frames.length; i++) {
    if (i > 0) await sleep(pauseMs);
    if (res.destroyed) return;
    res.write(`data: ${frames[i]}\n\n`);
  }
  res.end();
}

/** Reads an AsyncIterable body to the end. */
export async function readAll(body: Buffer | AsyncIterable<Buffer>): Promise<Buffer> {
  if (Buffer.isBuffer(body)) return body;
  const parts: Buffer[] = [];
  for await (const c of body) parts.push(c);
  return Buffer.concat(parts);
}
