import type { Logger } from 'pino';
import { redactBody, redactHeaders } from '../pipeline/redact';
import type { Dispatcher } from 'undici';
import { deadline } from '../pipeline/deadline';
import { readCapped } from './read-capped';
import { IdleBoundedPool } from './idle-bounded-pool';
import { undiciRequest } from './undici-core';
import { collect, CollectAborted, findHeader, type Collected } from './collect';
import { mayBeNoEndpointAnswer, noEndpointReason, type NoEndpointReason } from './no-endpoint';
import { CancelledError, TransportError, UPSTREAM_ERROR_BODY_CAP } from '../pipeline/errors';
import { headersOf } from '../pipeline/side-call';
import type { SideCallBody, SideCallClient, SideCallOptions, SideCallResponse, StreamingSideCallResponse } from '../pipeline/side-call';

/** A success body larger than this is refused: no side-call answer we read is legitimately bigger. */
export const MAX_SIDE_CALL_RESPONSE_BYTES = 256 * 1024 * 1024;

// The port the pipeline defines (pipeline/side-call.ts); this module implements it.
export type { SideCallBody, SideCallClient, SideCallOptions, SideCallResponse, StreamingSideCallResponse } from '../pipeline/side-call';

/** How a side call ended: the HTTP status, or why there was none. */
export type SideCallOutcome = number | 'error' | 'timeout' | 'cancelled';

/** Watches side calls (metrics, tracing) without the client knowing either. */
export interface SideCallObserver {
  /**
   * A call is about to be sent. `phase` is the step name without its index (`encode[2]` -> `encode`).
   * The returned headers, when given, are sent instead of the caller's (a span's own traceparent).
   */
  started(phase: string, path: string, headers: Readonly<Record<string, string>>): SideCallObservation;
}

export interface SideCallObservation {
  readonly headers?: Record<string, string>;
  /**
   * Called once: when the answer is read (`post`), its headers arrive (`postStreaming`), or the call
   * fails. `noEndpoint` is set when the answer is the EPP's "no endpoint" (gateway/no-endpoint.ts).
   */
  ended(outcome: SideCallOutcome, noEndpoint?: NoEndpointReason): void;
}

/** `encode[2]` -> `encode`: the label keeps a bounded set of values. */
export function sideCallPhase(step: string): string {
  const i = step.indexOf('[');
  return i < 0 ? step : step.slice(0, i);
}

function outcomeOf(err: unknown): SideCallOutcome {
  if (err instanceof CancelledError) return 'cancelled';
  if (err instanceof TransportError && err.timedOut) return 'timeout';
  return 'error';
}

export interface PoolOptions {
  /** Most idle keep-alive connections kept to the origin; 0 means Go's default, 2. */
  readonly maxIdleConns: number;
  /** How long an idle connection is kept, ms. */
  readonly idleTimeoutMs: number;
  /** Connect timeout, ms. */
  readonly connectTimeoutMs?: number;
  /** Metrics / tracing hooks, called once per call. */
  readonly observer?: SideCallObserver;
}

/** Lower-cases names and keeps the first value of each header. */
function flattenHeaders(raw: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(raw)) {
    if (v === undefined) continue;
    out[k.toLowerCase()] = Array.isArray(v) ? (v[0] ?? '') : v;
  }
  return out;
}

/** The body as undici takes it, and the headers it needs (a multi-part body's length up front). */
function requestBody(
  headers: Record<string, string>,
  body: SideCallBody,
): { headers: Record<string, string>; payload: string | Buffer | readonly Buffer[] } {
  if (typeof body === 'string' || Buffer.isBuffer(body)) return { headers, payload: body };
  if (body.length === 1) return { headers, payload: body[0]! };
  // undici writes an iterable as is; with the length known up front it is not chunked.
  let length = 0;
  for (const part of body) length += part.length;
  return { headers: { ...headers, 'content-length': String(length) }, payload: body };
}

const OK_ONLY: readonly number[] = [200];

/** A collected answer; its headers are looked up in the raw buffers when a step asks for one. */
class CollectedAnswer implements SideCallResponse {
  constructor(
    readonly status: number,
    private readonly rawHeaders: readonly Buffer[],
    readonly body: Buffer,
  ) {}

  header(name: string): string | undefined {
    return findHeader(this.rawHeaders, name);
  }
}

async function* oneChunk(chunk: Buffer): AsyncIterable<Buffer> {
  yield chunk;
}

/**
 * Pooled keep-alive client. One {@link IdleBoundedPool} per base URL; calls are abortable and
 * bounded, and every failure surfaces as a typed error ({@link TransportError} or
 * {@link CancelledError}).
 */
export class PooledSideCallClient implements SideCallClient {
  readonly baseUrl: string;
  private readonly pool: IdleBoundedPool;
  private readonly basePath: string;
  private readonly observer: SideCallObserver | undefined;

  constructor(baseUrl: string, opts: PoolOptions) {
    this.observer = opts.observer;
    const url = new URL(baseUrl);
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.basePath = url.pathname.replace(/\/+$/, '');
    this.pool = new IdleBoundedPool(url.origin, {
      maxIdle: opts.maxIdleConns,
      idleTimeoutMs: opts.idleTimeoutMs,
      connectTimeoutMs: opts.connectTimeoutMs ?? 30_000,
    });
  }

  private async dispatch(path: string, headers: Record<string, string>, body: SideCallBody, opts: SideCallOptions) {
    if (opts.signal.aborted) throw new CancelledError();
    const sent = requestBody(headers, body);
    const bound = opts.totalTimeoutMs && opts.totalTimeoutMs > 0 ? deadline(opts.signal, opts.totalTimeoutMs) : undefined;
    const signal = bound?.signal ?? opts.signal;
    try {
      // undici's request API (what `Dispatcher.prototype.request` is once its index has loaded: undici-core.ts).
      const res = await undiciRequest.call(this.pool, {
        method: 'POST',
        path: this.basePath + path,
        headers: sent.headers,
        // undici writes any iterable body chunk by chunk (its typings list only the other kinds).
        body: sent.payload as string | Buffer,
        signal,
        headersTimeout: opts.headersTimeoutMs && opts.headersTimeoutMs > 0 ? opts.headersTimeoutMs : 0,
        bodyTimeout: 0,
      });
      return { res, signal, release: () => bound?.dispose() };
    } catch (err) {
      bound?.dispose();
      throw this.transportError(err, opts, signal.aborted);
    }
  }

  /** `deadlinePassed`: our own total bound stopped the call. */
  private transportError(err: unknown, opts: SideCallOptions, deadlinePassed: boolean): Error {
    if (opts.signal.aborted) return new CancelledError();
    const e = err as { code?: string; message?: string; name?: string };
    const timedOut =
      deadlinePassed || e.code === 'UND_ERR_HEADERS_TIMEOUT' || e.code === 'UND_ERR_CONNECT_TIMEOUT' || e.name === 'TimeoutError';
    return new TransportError(opts.step, timedOut ? 'timed out' : `request failed: ${e.code ?? e.message ?? 'unknown error'}`, timedOut);
  }

  private observe(path: string, headers: Record<string, string>, opts: SideCallOptions): SideCallObservation | undefined {
    return this.observer?.started(sideCallPhase(opts.step), this.basePath + path, headers);
  }

  async post(path: string, headers: Record<string, string>, body: SideCallBody, opts: SideCallOptions): Promise<SideCallResponse> {
    const observation = this.observe(path, headers, opts);
    if (!observation) return this.postUnobserved(path, headers, body, opts);
    try {
      const res = await this.postUnobserved(path, observation.headers ?? headers, body, opts);
      observation.ended(res.status, mayBeNoEndpointAnswer(res) ? noEndpointReason(res) : undefined);
      return res;
    } catch (err) {
      observation.ended(outcomeOf(err));
      throw err;
    }
  }

  private async postUnobserved(
    path: string,
    headers: Record<string, string>,
    body: SideCallBody,
    opts: SideCallOptions,
  ): Promise<SideCallResponse> {
    const trace = opts.log?.isLevelEnabled('trace') ? opts.log : undefined;
    if (trace) this.traceRequest(trace, path, headers, body);
    if (opts.signal.aborted) throw new CancelledError();
    const sent = requestBody(headers, body);
    let answer: Collected;
    try {
      answer = await collect(
        this.pool,
        {
          method: 'POST',
          path: this.basePath + path,
          headers: sent.headers,
          body: sent.payload as string | Buffer,
          headersTimeout: opts.headersTimeoutMs && opts.headersTimeoutMs > 0 ? opts.headersTimeoutMs : 0,
          bodyTimeout: 0,
        },
        {
          okCap: MAX_SIDE_CALL_RESPONSE_BYTES,
          errorCap: UPSTREAM_ERROR_BODY_CAP,
          okStatuses: opts.okStatuses ?? OK_ONLY,
          signal: opts.signal,
          totalTimeoutMs: opts.totalTimeoutMs && opts.totalTimeoutMs > 0 ? opts.totalTimeoutMs : 0,
        },
      );
    } catch (err) {
      throw this.transportError(err, opts, err instanceof CollectAborted && err.why === 'timeout');
    }
    if (answer.over && (opts.okStatuses ?? OK_ONLY).includes(answer.status)) throw new TransportError(opts.step, 'response body too large');
    if (trace) trace.trace({ status: answer.status, body: redactBody(answer.body) }, 'response body');
    return new CollectedAnswer(answer.status, answer.rawHeaders, answer.body);
  }

  async postStreaming(
    path: string,
    headers: Record<string, string>,
    body: SideCallBody,
    opts: SideCallOptions,
  ): Promise<StreamingSideCallResponse> {
    const observation = this.observe(path, headers, opts);
    if (opts.log?.isLevelEnabled('trace')) this.traceRequest(opts.log, path, observation?.headers ?? headers, body);
    let res: Dispatcher.ResponseData;
    let release: () => void;
    let signal: AbortSignal;
    try {
      ({ res, release, signal } = await this.dispatch(path, observation?.headers ?? headers, body, opts));
    } catch (err) {
      observation?.ended(outcomeOf(err));
      throw err;
    }
    const answered = flattenHeaders(res.headers);
    if (observation && mayBeNoEndpointAnswer({ status: res.statusCode, ...headersOf(answered) })) {
      return this.observedRejection(res, answered, observation, (err) => this.transportError(err, opts, signal.aborted), release);
    }
    observation?.ended(res.statusCode);
    const stream = res.body;
    // The total bound covers the streamed body too: it stays armed until the stream is done.
    stream.once('close', release);
    return { status: res.statusCode, headers: answered, body: stream as AsyncIterable<Buffer>, cancel: () => stream.destroy() };
  }

  /**
   * An EPP rejection of a streamed call: a short error body, not a stream. It is read (capped, as
   * every error body is) to tell "no endpoint" from saturation, and handed on as one chunk.
   */
  private async observedRejection(
    res: Dispatcher.ResponseData,
    headers: Record<string, string>,
    observation: SideCallObservation,
    failed: (err: unknown) => Error,
    release: () => void,
  ): Promise<StreamingSideCallResponse> {
    let body: Buffer;
    try {
      body = (await readCapped(res.body, UPSTREAM_ERROR_BODY_CAP)).data;
    } catch (err) {
      observation.ended(res.statusCode);
      throw failed(err);
    } finally {
      release();
    }
    observation.ended(res.statusCode, noEndpointReason({ status: res.statusCode, ...headersOf(headers), body }));
    return { status: res.statusCode, headers, body: oneChunk(body), cancel: () => undefined };
  }

  /** Upstream's gateway-client trace line: method, path, redacted headers (as sent) and body. */
  private traceRequest(log: Logger, path: string, headers: Record<string, string>, body: SideCallBody): void {
    const sent = { 'content-type': 'application/json', ...headers };
    log.trace({ method: 'POST', path: this.basePath + path, headers: redactHeaders(sent), body: redactBody(body) }, 'request body');
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}
