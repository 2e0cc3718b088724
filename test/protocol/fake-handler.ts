/**
 * A RequestHandler that records what the protocol layer hands it and answers with scripted
 * decisions: the pipeline's stand-in for protocol tests.
 */
import type { Decision, Exchange, ForwardDecision, RequestHandler, RequestHead, RespondDecision } from '../../src/pipeline/decision';

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

export interface ExchangeScript {
  maxBodyBytes?: number;
  /** The decision for the complete body (default: forward unchanged). May throw or reject. */
  decide?: (body: Buffer) => Decision | Promise<Decision>;
  tooLarge?: (receivedBytes: number) => Decision;
}

export class RecordingExchange implements Exchange {
  readonly maxBodyBytes: number;
  readonly bodies: Buffer[] = [];
  readonly aborts: string[] = [];
  readonly tooLargeCalls: number[] = [];
  readonly completed = deferred<Buffer>();
  readonly aborted = deferred<string>();

  constructor(private readonly script: ExchangeScript) {
    this.maxBodyBytes = script.maxBodyBytes ?? 64 * 1024 * 1024;
  }

  complete(body: Buffer): Promise<Decision> {
    this.bodies.push(body);
    this.completed.resolve(body);
    const decide = this.script.decide ?? (() => forward());
    return Promise.resolve().then(() => decide(body));
  }

  tooLarge(receivedBytes: number): Decision {
    this.tooLargeCalls.push(receivedBytes);
    return this.script.tooLarge
      ? this.script.tooLarge(receivedBytes)
      : respond(413, { 'content-type': 'application/json' }, Buffer.from('{"error":"too large"}'), { error: 'too_large' });
  }

  abort(reason: string): void {
    this.aborts.push(reason);
    this.aborted.resolve(reason);
  }
}

export class ScriptedHandler implements RequestHandler {
  heads: RequestHead[] = [];
  exchanges: RecordingExchange[] = [];
  /** Per test: the script for a head, or null for pass-through. */
  script: (head: RequestHead) => ExchangeScript | null = () => null;
  /** Resolves with each exchange as it begins. */
  private began = deferred<RecordingExchange>();

  begin(head: RequestHead): Exchange | null {
    this.heads.push(head);
    const script = this.script(head);
    if (!script) return null;
    const ex = new RecordingExchange(script);
    this.exchanges.push(ex);
    this.began.resolve(ex);
    return ex;
  }

  /** The first exchange begun since the last reset. */
  firstExchange(): Promise<RecordingExchange> {
    return this.began.promise;
  }

  reset(script: (head: RequestHead) => ExchangeScript | null = () => null): void {
    this.heads = [];
    this.exchanges = [];
    this.script = script;
    this.began = deferred<RecordingExchange>();
  }
}

export function forward(over: Partial<ForwardDecision> = {}): ForwardDecision {
  return { kind: 'forward', setHeaders: {}, removeHeaders: [], body: null, metadata: {}, ...over };
}

export function respond(
  status: number,
  headers: Record<string, string>,
  body: Buffer | AsyncIterable<Buffer>,
  metadata: RespondDecision['metadata'] = {},
): RespondDecision {
  return { kind: 'respond', status, headers, body, metadata };
}

/** Polls `cond` until it holds (for effects that happen after a stream closes). */
export async function eventually(cond: () => boolean, what: string, limitMs = 5000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > limitMs) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
