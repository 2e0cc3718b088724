/**
 * What a handler answers (a value), and the one writer that puts it on the wire. Keeping the
 * answer a value lets the fault rules (delays, mid-body resets) apply to every endpoint alike.
 */

import type { ServerResponse } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';

export interface BufferedReply {
  readonly kind: 'buffered';
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  /** Pause before the headers (simulated generation time). */
  readonly delayMs: number;
}

export interface SseFrame {
  /** The whole frame, `data: ...\n\n`. */
  readonly data: string;
  /** Pause before writing it (time to first token, inter-token latency). */
  readonly delayMs: number;
}

/** An SSE answer: headers at once, then one write per frame. */
export interface StreamReply {
  readonly kind: 'stream';
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly frames: readonly SseFrame[];
}

export type Reply = BufferedReply | StreamReply;

export function jsonReply(status: number, value: unknown, delayMs = 0): BufferedReply {
  return {
    kind: 'buffered',
    status,
    headers: { 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify(value)),
    delayMs,
  };
}

/** The OpenAI error type names llm-d-inference-sim uses (`ErrorCodeToType`). */
function errorType(status: number): string {
  switch (status) {
    case 400:
      return 'BadRequestError';
    case 401:
      return 'AuthenticationError';
    case 403:
      return 'PermissionDeniedError';
    case 404:
      return 'NotFoundError';
    case 422:
      return 'UnprocessableEntityError';
    case 429:
      return 'RateLimitError';
    default:
      return status >= 500 ? 'InternalServerError' : 'APIConnectionError';
  }
}

export function errorReply(status: number, message: string): BufferedReply {
  return jsonReply(status, { error: { message, type: errorType(status), param: null, code: status } });
}

export function sseFrame(value: unknown): string {
  return `data: ${typeof value === 'string' ? value : JSON.stringify(value)}\n\n`;
}

export const SSE_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
};

export interface WriteControls {
  /** Extra pause between body writes. */
  readonly chunkDelayMs: number;
  /** Write the headers and part of the body, then destroy the connection. */
  readonly resetMidBody: boolean;
  /** Aborted when the connection closes, for whatever reason. */
  readonly signal: AbortSignal;
  /** Destroys the connection on the server's initiative. */
  destroy(): void;
  /** Called once the status line is written. */
  onHead(status: number): void;
}

/** Waits unless the connection went away; returns whether it is still worth writing. */
export async function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (ms > 0 && !signal.aborted) {
    try {
      await delay(ms, undefined, { signal });
    } catch {
      return false;
    }
  }
  return !signal.aborted;
}

/** A JSON body written slowly is split into this many writes. */
const SLOW_BODY_PIECES = 4;

function write(res: ServerResponse, data: string | Buffer): void {
  if (!res.destroyed) res.write(data);
}

/** Destroying at once would drop what is still buffered; the client must see the partial answer. */
function writeThenDestroy(res: ServerResponse, data: string | Buffer, ctl: WriteControls): Promise<void> {
  return new Promise<void>((resolve) => {
    if (res.destroyed) {
      resolve();
      return;
    }
    res.write(data, () => {
      ctl.destroy();
      resolve();
    });
  });
}

export async function writeReply(res: ServerResponse, reply: Reply, ctl: WriteControls): Promise<void> {
  if (reply.kind === 'buffered') {
    if (!(await pause(reply.delayMs, ctl.signal))) return;
    res.writeHead(reply.status, { ...reply.headers, 'content-length': String(reply.body.length) });
    ctl.onHead(reply.status);
    if (ctl.resetMidBody) {
      await writeThenDestroy(res, reply.body.subarray(0, Math.floor(reply.body.length / 2)), ctl);
      return;
    }
    if (ctl.chunkDelayMs <= 0 || reply.body.length < SLOW_BODY_PIECES) {
      res.end(reply.body);
      return;
    }
    const step = Math.ceil(reply.body.length / SLOW_BODY_PIECES);
    for (let at = 0; at < reply.body.length; at += step) {
      if (at > 0 && !(await pause(ctl.chunkDelayMs, ctl.signal))) return;
      write(res, reply.body.subarray(at, at + step));
    }
    res.end();
    return;
  }

  res.writeHead(reply.status, reply.headers);
  ctl.onHead(reply.status);
  // Headers go out now so the client sees the answer start before the first token.
  res.flushHeaders();
  for (let i = 0; i < reply.frames.length; i++) {
    const frame = reply.frames[i];
    if (!(await pause(frame.delayMs + (i > 0 ? ctl.chunkDelayMs : 0), ctl.signal))) return;
    if (ctl.resetMidBody) {
      await writeThenDestroy(res, frame.data, ctl);
      return;
    }
    write(res, frame.data);
  }
  res.end();
}
