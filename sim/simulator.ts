/**
 * A small, faithful stand-in for llm-d-inference-sim that records what it received, so tests can
 * assert the wire of every leg (render, encode, prefill, decode) and inject faults per leg.
 */

import { randomUUID } from 'node:crypto';
import { createServer, IncomingMessage, Server, ServerResponse } from 'node:http';

import { completionReply } from './completion-replies';
import { CONTROL_PREFIX, controlReply, MAX_CONTROL_BODY_BYTES } from './control-api';
import { HttpError } from './errors';
import { FaultTable } from './faults';
import { RESPONSES_PATH, RESPONSES_RENDER_PATH, responsesAsChat, responsesReply } from './responses-api';
import { Endpoint, generate } from './generation';
import { parseJson, readBody } from './http-body';
import { MESSAGES_PATH, messagesAsChat, messagesReply } from './messages-api';
import { EMBEDDINGS_PATH, embeddingsReply, MAX_MODEL_LEN, TOKENIZE_PATH, tokenizeReply } from './passthrough-apis';
import { resolveOptions, SimulatorSettings } from './options';
import { PREFIX_MISS_BODY, PrefixCache, prefersIfAvailable, prefixKey } from './prefix-cache';
import { Recorder } from './recorder';
import { renderChat, renderCompletions } from './render';
import { errorReply, jsonReply, pause, Reply, writeReply } from './reply';
import { isObject, kvParamsOf, requireObjectBody } from './request-fields';
import type { FaultRule, RecordedRequest, Simulator, SimulatorOptions } from './types';

export * from './types';
export { SimulatorConfigError, WaitTimeoutError } from './errors';

const COMPLETION_PATHS: Readonly<Record<string, Endpoint>> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completions',
  '/inference/v1/generate': 'generate',
};
const GET_PATHS = new Set(['/health', '/health/ready', '/v1/models', '/metrics']);

/**
 * The vLLM gauges the llm-d EPP scrapes (an endpoint whose scrape fails is not counted as ready):
 * an idle worker, so every endpoint scores alike.
 */
const METRICS_TEXT = Buffer.from(
  ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc'].map((m) => `# TYPE ${m} gauge\n${m} 0\n`).join(''),
);
function metricsReply(): Reply {
  return { kind: 'buffered', status: 200, headers: { 'content-type': 'text/plain; version=0.0.4' }, body: METRICS_TEXT, delayMs: 0 };
}
const RENDER_PATHS = new Set(['/v1/chat/completions/render', '/v1/completions/render']);

const MAX_MODELS_SEEN = 64;
const MAX_MODEL_CHARS = 256;
const DEFAULT_MODEL = 'sim-model';
const REQUEST_ID = /^[\x21-\x7e]{1,256}$/;

function headersOf(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

function faultReply(rule: FaultRule & { status: number }): Reply {
  if (rule.body === undefined) {
    const reply = errorReply(rule.status, `simulated fault: HTTP ${rule.status}`);
    return rule.headers ? { ...reply, headers: { ...reply.headers, ...rule.headers } } : reply;
  }
  const isJson = parseJson(Buffer.from(rule.body)) !== undefined;
  return {
    kind: 'buffered',
    status: rule.status,
    headers: { 'content-type': isJson ? 'application/json' : 'text/plain; charset=utf-8', ...rule.headers },
    body: Buffer.from(rule.body),
    delayMs: 0,
  };
}

/** What llm-d-inference-sim's router (fasthttprouter) answers for a path or method it has no route for. */
function routerReply(status: 404 | 405, text: string): Reply {
  return { kind: 'buffered', status, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: Buffer.from(text), delayMs: 0 };
}

/** The EPP's conditional-decode miss, as Envoy relays its ImmediateResponse. */
function prefixMissReply(): Reply {
  return {
    kind: 'buffered',
    status: 412,
    headers: { 'content-type': 'text/plain' },
    body: Buffer.from(PREFIX_MISS_BODY),
    delayMs: 0,
  };
}

/**
 * What the conditional-decode gate keys a request on. The EPP gates every inference path, so a
 * Responses request counts too, as the chat request it stands for.
 */
function gateOf(path: string, json: unknown): { endpoint: Endpoint; body: unknown } | undefined {
  const endpoint = COMPLETION_PATHS[path];
  if (endpoint !== undefined) return { endpoint, body: json };
  if (path !== RESPONSES_PATH) return undefined;
  try {
    return { endpoint: 'chat', body: isObject(json) ? responsesAsChat(json) : json };
  } catch {
    return { endpoint: 'chat', body: undefined }; // no prompt to read: the probe misses
  }
}

class SimulatorServer implements Simulator {
  readonly recorder: Recorder;
  readonly faults = new FaultTable();
  readonly prefixes = new PrefixCache();
  private readonly server: Server;
  private readonly modelsSeen = new Set<string>();
  private seq = 0;
  private closing = false;
  private closed: Promise<void> | undefined;
  port = 0;

  constructor(private readonly settings: SimulatorSettings) {
    this.recorder = new Recorder(settings.maxRecordedRequests, settings.maxRecordedBytes);
    this.server = createServer({ keepAlive: true, noDelay: true, requestTimeout: 300_000 }, (req, res) => {
      this.handle(req, res).catch(() => {
        if (!res.headersSent && !res.destroyed) res.writeHead(500).end();
      });
    });
    // Longer than the usual client idle timeouts, so a pooled connection is never closed under a request.
    this.server.keepAliveTimeout = 65_000;
    // Node's default of 2000 raw header entries (1000 headers) was a silent cut on Node 20; Node 24
    // answers 431. A worker that reads what the coordinator forwards (at most 1024 decoded headers).
    this.server.maxHeadersCount = 4096;
  }

  get url(): string {
    return `http://${this.settings.host}:${this.port}`;
  }
  get name(): string {
    return this.settings.name;
  }
  get role(): SimulatorSettings['role'] {
    return this.settings.role;
  }
  get requests(): RecordedRequest[] {
    return this.recorder.requests;
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.settings.port, this.settings.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    const address = this.server.address();
    if (address === null || typeof address === 'string') throw new Error('simulator: no TCP address');
    this.port = address.port;
  }

  clear(): void {
    this.recorder.clear();
  }

  forgetPrefixes(): void {
    this.prefixes.clear();
  }

  setFaults(rules: FaultRule[]): void {
    this.faults.set(rules);
  }

  waitForRequests(n: number, timeoutMs?: number): Promise<RecordedRequest[]> {
    return this.recorder.waitForRequests(n, timeoutMs);
  }

  waitForClose(predicate: (req: RecordedRequest) => boolean, timeoutMs?: number): Promise<RecordedRequest> {
    return this.recorder.waitForClose(predicate, timeoutMs);
  }

  close(): Promise<void> {
    if (!this.closed) {
      this.closing = true;
      this.closed = new Promise<void>((resolve) => {
        this.server.close(() => resolve());
        this.server.closeAllConnections();
      });
    }
    return this.closed;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.setHeader('x-inference-pod', this.settings.name);
    const rawRequestId = req.headers['x-request-id'];
    const givenRequestId = typeof rawRequestId === 'string' && REQUEST_ID.test(rawRequestId) ? rawRequestId : undefined;
    if (givenRequestId) res.setHeader('x-request-id', givenRequestId);
    const method = req.method ?? 'GET';
    const url = req.url ?? '/';
    const path = url.split('?', 1)[0];

    const controller = new AbortController();
    let record: RecordedRequest | undefined;
    // A connection we destroy on purpose (reset faults) was not closed early by the client.
    let destroyedByUs = false;
    const destroy = (): void => {
      destroyedByUs = true;
      res.socket?.destroy();
    };
    res.once('close', () => {
      controller.abort();
      if (record && !res.writableFinished && !destroyedByUs && !this.closing) this.recorder.markClosedEarly(record);
    });

    if (path.startsWith(CONTROL_PREFIX)) {
      const read = await readBody(req, MAX_CONTROL_BODY_BYTES);
      if (read.kind === 'aborted') return;
      const reply =
        read.kind === 'too-large'
          ? errorReply(413, 'control body too large')
          : this.safely(() => controlReply(method, path, parseJson(read.body), this));
      await this.send(res, reply, undefined, controller.signal, destroy);
      return;
    }

    const read = await readBody(req, this.settings.maxBodyBytes);
    const body = read.kind === 'too-large' ? Buffer.alloc(0) : read.body;
    const json = parseJson(body);
    record = {
      seq: ++this.seq,
      method,
      path,
      url,
      headers: headersOf(req),
      body,
      json,
      receivedAt: Date.now(),
      closedEarly: read.kind === 'aborted',
      status: undefined,
    };
    this.recorder.add(record);
    if (read.kind === 'aborted') return;
    if (read.kind === 'too-large') {
      res.setHeader('connection', 'close');
      await this.send(
        res,
        errorReply(413, `request body larger than ${this.settings.maxBodyBytes} bytes`),
        record,
        controller.signal,
        destroy,
      );
      return;
    }

    const profile = req.headers['epp-profile'];
    const fault = this.faults.take(path, typeof profile === 'string' ? profile : undefined);
    if (fault?.delayMs !== undefined && !(await pause(fault.delayMs, controller.signal))) return;
    if (fault?.reset) {
      destroy();
      return;
    }
    if (fault?.hang) return; // answered by nobody; the client or close() ends it
    let reply =
      fault?.status !== undefined
        ? faultReply(fault as FaultRule & { status: number })
        : this.gatedRoute(req, method, path, body, json, givenRequestId ?? randomUUID());
    // Headers without a status decorate the normal answer (an EPP's response headers, say).
    if (fault?.headers && fault.status === undefined) reply = { ...reply, headers: { ...reply.headers, ...fault.headers } };
    await this.send(res, reply, record, controller.signal, destroy, fault);
  }

  private async send(
    res: ServerResponse,
    reply: Reply,
    record: RecordedRequest | undefined,
    signal: AbortSignal,
    destroy: () => void,
    fault?: FaultRule,
  ): Promise<void> {
    await writeReply(res, reply, {
      chunkDelayMs: fault?.chunkDelayMs ?? 0,
      resetMidBody: fault?.resetMidBody ?? false,
      signal,
      destroy,
      onHead: (status) => {
        if (record) record.status = status;
      },
    });
  }

  private safely(build: () => Reply): Reply {
    try {
      return build();
    } catch (err) {
      if (err instanceof HttpError) return errorReply(err.status, err.message);
      return errorReply(500, `simulator error: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /**
   * The normal answer, behind the conditional-decode gate when `honourPreferIfAvailable` is on: a
   * `Prefer: if-available` request whose prefix was never served gets the EPP's 412; a normal
   * request answered 200 records its prefix (a prefill leg, which keeps no KV for decode, does not).
   */
  private gatedRoute(req: IncomingMessage, method: string, path: string, body: Buffer, json: unknown, requestId: string): Reply {
    const gate = gateOf(path, json);
    if (!this.settings.honourPreferIfAvailable || gate === undefined || method !== 'POST') {
      return this.safely(() => this.route(method, path, body, json, requestId));
    }
    const endpoint = gate.endpoint;
    const key = prefixKey(endpoint, gate.body, this.settings.prefixTokens);
    if (prefersIfAvailable(req.headers['prefer'])) {
      return this.prefixes.has(key) ? this.safely(() => this.route(method, path, body, json, requestId)) : prefixMissReply();
    }
    const reply = this.safely(() => this.route(method, path, body, json, requestId));
    const prefill = isObject(json) && kvParamsOf(json, endpoint === 'generate')?.do_remote_decode === true;
    if (reply.status === 200 && !prefill) this.prefixes.add(key);
    return reply;
  }

  private route(method: string, path: string, body: Buffer, json: unknown, requestId: string): Reply {
    const endpoint = COMPLETION_PATHS[path];
    const known =
      endpoint !== undefined ||
      path === RESPONSES_PATH ||
      RENDER_PATHS.has(path) ||
      GET_PATHS.has(path) ||
      path === TOKENIZE_PATH ||
      path === MESSAGES_PATH ||
      // llm-d-inference-sim registers no embeddings route with --mm-encoder-only.
      (path === EMBEDDINGS_PATH && this.settings.role !== 'encode') ||
      (path === RESPONSES_RENDER_PATH && this.settings.responsesRender);
    if (!known) return routerReply(404, 'Not Found');
    if (GET_PATHS.has(path)) {
      if (method !== 'GET') return routerReply(405, 'Method Not Allowed');
      if (path === '/metrics') return metricsReply();
      return path === '/v1/models' ? jsonReply(200, this.models()) : jsonReply(200, {});
    }
    if (method !== 'POST') return routerReply(405, 'Method Not Allowed');
    if (body.length > 0 && json === undefined) throw new HttpError(400, 'Invalid JSON body');
    const request = requireObjectBody(json);
    if (path === '/v1/chat/completions/render') return jsonReply(200, renderChat(request));
    if (path === '/v1/completions/render') return jsonReply(200, renderCompletions(request));
    if (path === RESPONSES_RENDER_PATH) return jsonReply(200, renderChat(responsesAsChat(request)));
    if (path === TOKENIZE_PATH) return jsonReply(200, tokenizeReply(request));
    if (path === EMBEDDINGS_PATH) return jsonReply(200, embeddingsReply(request));
    if (path === MESSAGES_PATH) return messagesReply(generate('chat', messagesAsChat(request), requestId, this.settings), requestId);
    if (path === RESPONSES_PATH) {
      this.noteModel(request.model);
      const gen = generate('chat', responsesAsChat(request), requestId, this.settings);
      return responsesReply(gen, request.instructions, requestId, this.settings);
    }
    this.noteModel(request.model);
    const gen = generate(endpoint, request, requestId, this.settings);
    return completionReply(endpoint, gen, requestId, this.settings);
  }

  private noteModel(model: unknown): void {
    if (typeof model !== 'string' || model.length === 0 || model.length > MAX_MODEL_CHARS) return;
    if (this.modelsSeen.size < MAX_MODELS_SEEN) this.modelsSeen.add(model);
  }

  private models(): unknown {
    const names = this.modelsSeen.size > 0 ? [...this.modelsSeen] : [DEFAULT_MODEL];
    const created = Math.floor(Date.now() / 1000);
    return {
      object: 'list',
      data: names.map((id) => ({
        id,
        object: 'model',
        created,
        owned_by: 'epd-sim',
        root: id,
        parent: null,
        max_model_len: MAX_MODEL_LEN,
      })),
    };
  }
}

/** Starts a simulator listening on 127.0.0.1; throws SimulatorConfigError on bad options. */
export async function startSimulator(opts: SimulatorOptions): Promise<Simulator> {
  const sim = new SimulatorServer(resolveOptions(opts));
  await sim.listen();
  return sim;
}
