/**
 * Decode `force_stream` (reference §12.3): a non-streaming client request runs upstream as a
 * streaming one, and the SSE answer is reassembled into the client's JSON reply.
 *
 * Envoy cannot forward the rewritten request and hand us its response without response processing
 * on every request (Envoy ignores `mode_override` under FULL_DUPLEX_STREAMED, docs/force-stream.md),
 * so, as upstream's ext_proc counterpart (§12.3.9), the forced request is a side call through the
 * gateway and the reply is a local answer: whole for the buffered path, streamed for the
 * incremental one. Pass-through outcomes keep the normal forwarded decode.
 */
import type { JsonObject, RequestContext } from '../../pipeline/context';
import { ConfigError } from '../../config/errors';
import { CancelledError, UPSTREAM_ERROR_BODY_CAP } from '../../pipeline/errors';
import type { ParamReader } from '../../pipeline/params';
import type { SideCallClient, StreamingSideCallResponse } from '../../pipeline/side-call';
import type { ForceStreamObserver, StepOutcome, StepParams } from '../../pipeline/step';
import { CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH, GENERATE_PATH, gatewayLegHeaders, isJsonObject } from '../wire';
import { ReservationBudget, reservationBytes } from './budget';
import { ForceStreamError } from './errors';
import { goJson, IncrementalReply } from './incremental';
import { Reassembler, type StreamShape } from './reassemble';
import { MAX_BUDGET_BYTES, parseByteSize } from './size';
import { sseFrames, type SseFrame } from './sse';

export const RESPONSES_PATH = '/v1/responses';
/** `force_stream_buffer_size` default: 1GiB. */
export const DEFAULT_BUFFER_BYTES = 1024 ** 3;
/** `force_stream_max_request_size` default: 256KiB (or the buffer size when smaller). */
export const DEFAULT_MAX_REQUEST_BYTES = 256 * 1024;
const MAX_LINE_BYTES = 1024 * 1024;

export type ForceStreamResult = Parameters<ForceStreamObserver['result']>[1];

export interface ForceStreamConfig {
  readonly bufferBytes: number;
  readonly maxRequestBytes: number;
}

/** Reads the force-stream params of `decode`; `null` when `force_stream` is off (no budget exists). */
export function readForceStreamConfig(step: string, p: ParamReader, params: StepParams): ForceStreamConfig | null {
  // A non-bool is a start-up error even when the sizes below are never read.
  if (!p.bool('force_stream', false)) return null;
  const size = (key: string): number | null => {
    const v = params[key];
    if (v === undefined || v === null) return null;
    if (typeof v !== 'string') throw new ConfigError(`${step}.params.${key}`, 'a size string such as "256KiB"', v);
    const parsed = parseByteSize(v);
    if ('error' in parsed) throw new ConfigError(`${step}.params.${key}`, `a size such as "256KiB" (${parsed.error})`, v);
    if (parsed.bytes === 0) throw new ConfigError(`${step}.params.${key}`, 'a size greater than zero', v);
    if (parsed.bytes > MAX_BUDGET_BYTES)
      throw new ConfigError(`${step}.params.${key}`, 'a size within the maximum budget (2^63-1 bytes)', v);
    return parsed.bytes;
  };
  const bufferBytes = size('force_stream_buffer_size') ?? DEFAULT_BUFFER_BYTES;
  const explicit = size('force_stream_max_request_size');
  if (explicit !== null && explicit > bufferBytes) {
    throw new ConfigError(
      `${step}.params.force_stream_max_request_size`,
      `a size not above force_stream_buffer_size (${bufferBytes} bytes)`,
      params['force_stream_max_request_size'],
    );
  }
  const maxRequestBytes = explicit ?? Math.min(bufferBytes, DEFAULT_MAX_REQUEST_BYTES);
  return { bufferBytes, maxRequestBytes };
}

/** The reply shape for the original path; `null` for any other API (pass-through, not counted). */
export function shapeForPath(path: string): StreamShape | null {
  const q = path.indexOf('?');
  const p = q === -1 ? path : path.slice(0, q);
  switch (p) {
    case CHAT_COMPLETIONS_PATH:
      return 'chat';
    case COMPLETIONS_PATH:
      return 'text';
    case GENERATE_PATH:
      return 'generate';
    case RESPONSES_PATH:
      return 'responses';
    default:
      return null;
  }
}

/** Tool calls, function calls and logprobs are not reassembled: such requests pass through. */
export function isLossy(body: JsonObject): boolean {
  const tools = body['tools'];
  const functions = body['functions'];
  const logprobs = body['logprobs'];
  return (
    (Array.isArray(tools) && tools.length > 0) ||
    (Array.isArray(functions) && functions.length > 0) ||
    logprobs === true ||
    typeof logprobs === 'number'
  );
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** The token limit (§12.3.2), or `null` = unbounded. */
export function tokenLimit(shape: StreamShape, body: JsonObject): number | null {
  const src = shape === 'generate' ? body['sampling_params'] : body;
  if (!isJsonObject(src)) return null;
  const fields =
    shape === 'chat' ? ['max_tokens', 'max_completion_tokens'] : shape === 'responses' ? ['max_output_tokens'] : ['max_tokens'];
  for (const f of fields) if (isCount(src[f])) return src[f] as number;
  return null;
}

export function choiceCount(shape: StreamShape, body: JsonObject): number {
  const src = shape === 'generate' ? body['sampling_params'] : body;
  const n = isJsonObject(src) ? src['n'] : undefined;
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 1 ? n : 1;
}

/** The forced body: a shallow copy with `stream: true` (and `include_usage` for chat and text). */
export function forcedBody(shape: StreamShape, body: JsonObject): JsonObject {
  const out: JsonObject = { ...body, stream: true };
  if (shape === 'chat' || shape === 'text') {
    const opts = body['stream_options'];
    out['stream_options'] = { ...(isJsonObject(opts) ? opts : {}), include_usage: true };
  }
  return out;
}

type Plan =
  | { readonly kind: 'pass' }
  | { readonly kind: 'incremental'; readonly shape: 'chat' | 'text' }
  | {
      readonly kind: 'buffered';
      readonly shape: StreamShape;
      readonly choices: number;
      readonly reserved: number;
      readonly release: () => void;
    };

export class ForceStream {
  readonly budget: ReservationBudget;

  constructor(
    readonly config: ForceStreamConfig,
    private readonly gateway: SideCallClient,
    private readonly headersTimeoutMs: number,
    private readonly observer: ForceStreamObserver | undefined,
  ) {
    this.budget = new ReservationBudget(config.bufferBytes, (b) => observer?.reservedBytes(b));
  }

  /**
   * The client's answer when this request is force-streamed, or `null` to pass through (the
   * normal forwarded decode). `body` is the prepared decode body; it is not modified.
   */
  async run(ctx: RequestContext, body: JsonObject): Promise<StepOutcome | null> {
    if (body['stream'] === true) return null;
    const plan = this.plan(ctx, body);
    if (plan.kind === 'pass') return null;
    try {
      const res = await this.send(ctx, plan.shape, body, plan.kind === 'buffered' ? plan.reserved : 0);
      if (res.status >= 400) return await upstreamError(res);
      if (plan.kind === 'incremental') return await this.incremental(ctx, plan.shape, res);
      return await this.buffered(ctx, plan.shape, plan.choices, plan.reserved, res);
    } catch (err) {
      // The client went away and the call was cancelled under us: not the worker's fault.
      if (ctx.signal.aborted && !(err instanceof CancelledError)) throw new CancelledError();
      throw err;
    } finally {
      if (plan.kind === 'buffered') plan.release();
    }
  }

  private plan(ctx: RequestContext, body: JsonObject): Plan {
    const shape = shapeForPath(ctx.originalPath);
    if (!shape) return { kind: 'pass' };
    if ((shape === 'chat' || shape === 'text') && isLossy(body)) {
      this.observer?.result(ctx.model, 'fallback_unsupported');
      return { kind: 'pass' };
    }
    const choices = choiceCount(shape, body);
    if ((shape === 'chat' || shape === 'text') && choices === 1) return { kind: 'incremental', shape };
    const tokens = tokenLimit(shape, body);
    const reserved = tokens === null ? null : reservationBytes(this.config.maxRequestBytes, tokens, choices);
    if (reserved === null) {
      this.observer?.result(ctx.model, 'fallback_unbounded');
      return { kind: 'pass' };
    }
    const release = this.budget.tryReserve(reserved);
    if (!release) {
      this.observer?.result(ctx.model, 'fallback_budget');
      return { kind: 'pass' };
    }
    return { kind: 'buffered', shape, choices, reserved, release };
  }

  private async send(ctx: RequestContext, shape: StreamShape, body: JsonObject, reservedBytes: number): Promise<StreamingSideCallResponse> {
    const headers = gatewayLegHeaders(ctx.forwardedHeaders(), ctx.requestId, 'decode');
    const payload = ctx.serialize(forcedBody(shape, body));
    if (ctx.log.isLevelEnabled('info')) {
      ctx.log.info(
        { path: ctx.originalPath, reservedBytes },
        reservedBytes > 0 ? 'force-streaming request' : 'force-streaming request (incremental)',
      );
    }
    if (ctx.log.isLevelEnabled('debug')) {
      let bodyLen = 0;
      for (const part of payload) bodyLen += part.length;
      ctx.log.debug({ method: 'POST', path: ctx.originalPath, bodyLen }, 'force-stream request body');
    }
    // A transport failure throws a TransportError: 502, nothing written.
    return this.gateway.postStreaming(ctx.originalPath, headers, payload, {
      step: 'decode',
      signal: ctx.signal,
      headersTimeoutMs: this.headersTimeoutMs,
    });
  }

  private async buffered(
    ctx: RequestContext,
    shape: StreamShape,
    choices: number,
    reserved: number,
    res: StreamingSideCallResponse,
  ): Promise<StepOutcome> {
    const reassembler = new Reassembler(shape, choices);
    const lineCap = shape === 'responses' ? reserved : Math.min(reserved, MAX_LINE_BYTES);
    try {
      for await (const frame of sseFrames(res.body, lineCap)) {
        reassembler.add(frame);
        if (reassembler.bufferedBytes > reserved) {
          throw new ForceStreamError('ceiling', 'buffered response exceeded its reserved budget');
        }
      }
    } catch (err) {
      res.cancel();
      if (err instanceof ForceStreamError && err.kind === 'ceiling') {
        this.observer?.result(ctx.model, 'error_ceiling');
        ctx.log.error({ reservedBytes: reserved, err: err.message }, 'force-stream aborted');
      }
      throw err;
    }
    // Encoded as upstream's Go encoder does (`<`, `>`, `&` escaped), so replies match byte for byte.
    const out = Buffer.from(goJson(reassembler.result()));
    this.observer?.result(ctx.model, 'forced');
    if (ctx.log.isLevelEnabled('info')) ctx.log.info({ bytes: out.length }, 'force-stream complete');
    return { respond: { status: 200, headers: { 'content-type': 'application/json', 'content-length': String(out.length) }, body: out } };
  }

  /**
   * Reads up to the first content fragment before answering, so an error before it is still a
   * clean 502; after it the reply is committed and a failure truncates it (as upstream).
   */
  private async incremental(ctx: RequestContext, shape: 'chat' | 'text', res: StreamingSideCallResponse): Promise<StepOutcome> {
    const reply = new IncrementalReply(shape);
    const frames = sseFrames(res.body, MAX_LINE_BYTES);
    let first: Buffer | null = null;
    let ended = false;
    try {
      for (;;) {
        const next = await frames.next();
        if (next.done) {
          ended = true;
          break;
        }
        first = reply.add(next.value);
        if (first) break;
      }
    } catch (err) {
      res.cancel();
      throw err;
    }
    const observer = this.observer;
    const finish = (): Buffer => {
      observer?.result(ctx.model, 'forced');
      if (ctx.log.isLevelEnabled('info')) ctx.log.info('force-stream complete (incremental)');
      return reply.finish();
    };
    if (ended) {
      const whole = finish();
      return {
        respond: { status: 200, headers: { 'content-type': 'application/json', 'content-length': String(whole.length) }, body: whole },
      };
    }
    return {
      respond: { status: 200, headers: { 'content-type': 'application/json' }, body: relay(first!, frames, reply, finish, res, ctx) },
    };
  }
}

async function* relay(
  first: Buffer,
  frames: AsyncGenerator<SseFrame, void, undefined>,
  reply: IncrementalReply,
  finish: () => Buffer,
  res: StreamingSideCallResponse,
  ctx: RequestContext,
): AsyncGenerator<Buffer, void, undefined> {
  yield first;
  let completed = false;
  try {
    for (;;) {
      let next: IteratorResult<SseFrame>;
      try {
        next = await frames.next();
      } catch (err) {
        // Committed: the client keeps a truncated body, as upstream (the step reported success).
        ctx.log.error({ err: err instanceof Error ? err.message : String(err) }, 'force-stream truncated after commit');
        return;
      }
      if (next.done) break;
      const chunk = reply.add(next.value);
      if (chunk) yield chunk;
    }
    completed = true;
    yield finish();
  } finally {
    // The client went away (the relay stopped early): stop the worker too.
    if (!completed) {
      res.cancel();
      await frames.return(undefined).catch(() => undefined);
    }
  }
}

/** Upstream status >= 400: that status, its content type and at most 8 KiB of its body (§12.3.4). */
async function upstreamError(res: StreamingSideCallResponse): Promise<StepOutcome> {
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of res.body) {
      const room = UPSTREAM_ERROR_BODY_CAP - size;
      if (chunk.length >= room) {
        parts.push(chunk.subarray(0, room));
        size += room;
        res.cancel();
        break;
      }
      parts.push(chunk);
      size += chunk.length;
    }
  } catch {
    // a body cut short: what arrived is answered
  }
  const body = Buffer.concat(parts, size);
  const contentType = res.headers['content-type'] || 'application/json';
  return { respond: { status: res.status, headers: { 'content-type': contentType, 'content-length': String(body.length) }, body } };
}
