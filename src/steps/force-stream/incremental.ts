/**
 * The incremental path (reference §12.3.6): a chat or text reply with one choice, written while
 * the frames arrive, holding one frame at a time. The envelope is captured until the first
 * non-empty content fragment; from there each fragment goes out JSON-escaped as Go escapes it.
 * The result parses equal to the buffered reply of the same frames.
 */
import { Envelope, mergeUsage } from './reassemble';
import type { SseFrame } from './sse';

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

const GO_ESCAPES = /[<>&\u2028\u2029]/g;

/** JSON text as Go's encoding/json writes it (`<`, `>`, `&`, U+2028/9 as \u escapes). */
export function goJson(value: unknown): string {
  return JSON.stringify(value).replace(GO_ESCAPES, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export class IncrementalReply {
  private readonly envelope = new Envelope();
  private role = '';
  private finishReason: unknown = null;
  private usage: Obj | null = null;
  private started = false;

  constructor(readonly shape: 'chat' | 'text') {}

  /** Whether the prefix went out (the reply is committed). */
  get committed(): boolean {
    return this.started;
  }

  /** Folds one frame; returns the bytes to write now, if any. */
  add(frame: SseFrame): Buffer | null {
    if (!this.started) this.envelope.take(frame, this.shape === 'text');
    this.usage = mergeUsage(this.usage, frame['usage']);
    const choices = frame['choices'];
    const first = Array.isArray(choices) && isObj(choices[0]) ? (choices[0] as Obj) : null;
    if (!first) return null;
    if (first['finish_reason'] !== null && first['finish_reason'] !== undefined) this.finishReason = first['finish_reason'];
    let fragment: unknown;
    if (this.shape === 'chat') {
      const delta = first['delta'];
      if (!isObj(delta)) return null;
      if (!this.started && typeof delta['role'] === 'string' && delta['role'] !== '') this.role = delta['role'];
      fragment = delta['content'];
    } else {
      fragment = first['text'];
    }
    if (typeof fragment !== 'string' || fragment === '') return null;
    const escaped = goJson(fragment).slice(1, -1);
    if (this.started) return Buffer.from(escaped);
    this.started = true;
    return Buffer.from(this.prefix() + escaped);
  }

  /** The rest of the reply at the end of the stream (the prefix too, if no content arrived). */
  finish(): Buffer {
    let out = this.started ? '' : this.prefix();
    this.started = true;
    out += this.shape === 'chat' ? '"}' : '"';
    out += `,"finish_reason":${goJson(this.finishReason)}}]`;
    if (this.usage) out += `,"usage":${goJson(this.usage)}`;
    return Buffer.from(out + '}');
  }

  private prefix(): string {
    const env = this.envelope.fields(this.shape === 'chat' ? 'chat.completion' : (this.envelope.object ?? 'text_completion'));
    const head = goJson(env).slice(0, -1);
    return this.shape === 'chat'
      ? `${head},"choices":[{"index":0,"logprobs":null,"message":{"role":${goJson(this.role || 'assistant')},"content":"`
      : `${head},"choices":[{"index":0,"logprobs":null,"text":"`;
  }
}
