import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PooledSideCallClient } from '../../../src/gateway/client';
import type { SideCallClient } from '../../../src/gateway/client';
import { RequestContext } from '../../../src/pipeline/context';
import type { JsonObject, MultimodalEntry } from '../../../src/pipeline/context';
import type { Route, StepDeps } from '../../../src/pipeline/step';
import { silentLogger } from '../../../src/observability/logger';

/** One request as the fake saw it on the wire. */
export interface SeenRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  raw: string;
  /** The body parsed as JSON (undefined when it is not JSON). */
  json: any;
}

export interface Reply {
  status?: number;
  headers?: Record<string, string>;
  /** An object is sent as JSON; a string verbatim. */
  body?: unknown;
}

export type Responder = (req: SeenRequest) => Reply | Promise<Reply>;

/** A real HTTP server on 127.0.0.1:<ephemeral> that records every request and answers per `respond`. */
export class FakeUpstream {
  readonly seen: SeenRequest[] = [];
  respond: Responder = () => ({ status: 200, body: {} });
  private server: Server | null = null;
  private readonly sockets = new Set<import('node:net').Socket>();

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return this;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server!.address() as AddressInfo).port}`;
  }

  reset(): void {
    this.seen.length = 0;
    this.respond = () => ({ status: 200, body: {} });
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
    const seen: SeenRequest = { method: req.method ?? '', path: req.url ?? '', headers, raw, json };
    this.seen.push(seen);
    const reply = await this.respond(seen);
    const body = reply.body === undefined ? '' : typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body);
    res.writeHead(reply.status ?? 200, { 'content-type': 'application/json', ...reply.headers });
    res.end(body);
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

/** StepDeps built by hand around real pooled clients; `close()` releases every pool it made. */
export class TestDeps {
  readonly clients: SideCallClient[] = [];
  readonly clientForCalls: Array<{ baseUrl: string; opts: { maxIdleConns: number; idleTimeoutMs: number } }> = [];
  readonly routes: Route[] = [];
  readonly deps: StepDeps;

  constructor(gatewayUrl: string, gatewayTimeoutMs = 5000) {
    const gateway = new PooledSideCallClient(gatewayUrl, { maxIdleConns: 10, idleTimeoutMs: 1000 });
    this.clients.push(gateway);
    this.deps = {
      gateway,
      clientFor: (baseUrl, opts) => {
        this.clientForCalls.push({ baseUrl, opts });
        const c = new PooledSideCallClient(baseUrl, opts);
        this.clients.push(c);
        return c;
      },
      gatewayTimeoutMs,
      log: silentLogger(),
      registerRoute: (route) => this.routes.push(route),
    };
  }

  async close(): Promise<void> {
    await Promise.all(this.clients.map((c) => c.close()));
  }
}

export interface CtxInit {
  path?: string;
  body?: JsonObject;
  headers?: Record<string, string>;
  requestId?: string;
  tokenIds?: number[] | null;
  entries?: MultimodalEntry[];
  kvTransferParams?: Record<string, unknown> | null;
  ecTransferParams?: Array<Record<string, unknown>> | null;
  signal?: AbortSignal;
}

export function makeCtx(init: CtxInit = {}): RequestContext {
  const ctx = new RequestContext({
    requestId: init.requestId ?? 'req-1',
    originalPath: init.path ?? '/v1/chat/completions',
    headers: init.headers ?? {},
    body: init.body ?? { model: 'm' },
    signal: init.signal ?? new AbortController().signal,
    log: silentLogger(),
  });
  if (init.tokenIds !== undefined) ctx.tokenIds = init.tokenIds;
  if (init.entries) ctx.multimodalEntries = init.entries;
  if (init.kvTransferParams !== undefined) ctx.kvTransferParams = init.kvTransferParams;
  if (init.ecTransferParams !== undefined) ctx.ecTransferParams = init.ecTransferParams;
  return ctx;
}

/** A rendered image entry as render leaves it. */
export function entry(index: number, hash: string, offset: number, length: number, kwargsData = `kw-${hash}`): MultimodalEntry {
  return { index, hash, kwargsData, placeholder: { offset, length } };
}

/** A chat body with one text part and `n` data-URI image parts. */
export function chatBodyWithImages(n: number, extra: JsonObject = {}): JsonObject {
  const content: JsonObject[] = [{ type: 'text', text: 'describe' }];
  for (let i = 0; i < n; i++) content.push({ type: 'image_url', image_url: { url: `data:image/png;base64,AAA${i}` } });
  return { model: 'm', messages: [{ role: 'user', content }], ...extra };
}

export interface FakeUpstreams {
  readonly renderService: FakeUpstream;
  readonly gateway: FakeUpstream;
  /** Step deps whose gateway client points at `gateway`; set once the suite has started. */
  readonly td: TestDeps;
}

/**
 * A fake render service and a fake gateway on loopback for one suite, with step deps bound to the
 * gateway; both forget their requests and replies before each test.
 */
export function useFakeUpstreams(): FakeUpstreams {
  const up = { renderService: new FakeUpstream(), gateway: new FakeUpstream() } as {
    renderService: FakeUpstream;
    gateway: FakeUpstream;
    td: TestDeps;
  };
  beforeAll(async () => {
    await Promise.all([up.renderService.start(), up.gateway.start()]);
    up.td = new TestDeps(up.gateway.url);
  });
  afterAll(async () => {
    await up.td?.close();
    await Promise.all([up.renderService.stop(), up.gateway.stop()]);
  });
  beforeEach(() => {
    up.renderService.reset();
    up.gateway.reset();
  });
  return up;
}
