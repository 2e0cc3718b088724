/**
 * Folds the SSE frames of a forced stream into the non-streaming JSON reply (reference §12.3.5 and
 * §12.3.7), for chat completions, completions (text), generate and responses. Pure: no I/O, no
 * Envoy; the caller feeds frames and compares {@link Reassembler.bufferedBytes} with its budget.
 */
import type { SseFrame } from './sse';

export type StreamShape = 'chat' | 'text' | 'generate' | 'responses';

type Json = unknown;
type Obj = Record<string, unknown>;

interface Choice {
  role: string;
  text: string;
  tokenIds: Json[];
  finishReason: Json;
}

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const nonEmptyString = (v: unknown): v is string => typeof v === 'string' && v !== '';

/** `usage` objects merge field by field; non-null values overwrite. */
export function mergeUsage(into: Obj | null, usage: unknown): Obj | null {
  if (!isObj(usage)) return into;
  const out = into ?? {};
  for (const [k, v] of Object.entries(usage)) if (v !== null && v !== undefined) out[k] = v;
  return out;
}

/** The envelope of chat and text replies: first non-empty id/model/fingerprint, first non-null created. */
export class Envelope {
  id: string | undefined;
  model: string | undefined;
  systemFingerprint: string | undefined;
  created: Json;
  object: string | undefined;

  take(frame: SseFrame, keepObject: boolean): void {
    if (this.id === undefined && nonEmptyString(frame['id'])) this.id = frame['id'];
    if (this.model === undefined && nonEmptyString(frame['model'])) this.model = frame['model'];
    if (this.systemFingerprint === undefined && nonEmptyString(frame['system_fingerprint']))
      this.systemFingerprint = frame['system_fingerprint'];
    if (this.created === undefined && frame['created'] !== undefined && frame['created'] !== null) this.created = frame['created'];
    if (keepObject && this.object === undefined && nonEmptyString(frame['object'])) this.object = frame['object'];
  }

  /** The envelope fields seen, in upstream's order, then `object`. */
  fields(object: string): Obj {
    const out: Obj = {};
    if (this.id !== undefined) out['id'] = this.id;
    if (this.model !== undefined) out['model'] = this.model;
    if (this.systemFingerprint !== undefined) out['system_fingerprint'] = this.systemFingerprint;
    if (this.created !== undefined) out['created'] = this.created;
    out['object'] = object;
    return out;
  }
}

export class Reassembler {
  private readonly envelope = new Envelope();
  private readonly choices = new Map<number, Choice>();
  private usage: Obj | null = null;
  private requestId: string | undefined;
  private bytes = 0;
  // responses shape
  private responseText = '';
  private completed: Json = undefined;

  constructor(
    readonly shape: StreamShape,
    /** Choices with an index at or above this are dropped (not counted). */
    private readonly maxChoices: number,
  ) {}

  /** Bytes of generated content held so far (envelopes not counted): what the budget bounds. */
  get bufferedBytes(): number {
    return this.bytes;
  }

  add(frame: SseFrame): void {
    if (this.shape === 'responses') return this.addResponses(frame);
    if (this.shape === 'generate') {
      if (this.requestId === undefined && nonEmptyString(frame['request_id'])) this.requestId = frame['request_id'];
    } else {
      this.envelope.take(frame, this.shape === 'text');
      this.usage = mergeUsage(this.usage, frame['usage']);
    }
    const choices = frame['choices'];
    if (!Array.isArray(choices)) return;
    for (const c of choices) {
      if (!isObj(c)) continue;
      const index = typeof c['index'] === 'number' && Number.isInteger(c['index']) ? c['index'] : 0;
      if (index < 0 || index >= this.maxChoices) continue;
      let choice = this.choices.get(index);
      if (!choice) {
        choice = { role: '', text: '', tokenIds: [], finishReason: null };
        this.choices.set(index, choice);
      }
      this.foldChoice(choice, c);
    }
  }

  private foldChoice(choice: Choice, c: Obj): void {
    switch (this.shape) {
      case 'chat': {
        const delta = c['delta'];
        if (isObj(delta)) {
          if (nonEmptyString(delta['role'])) choice.role = delta['role'];
          if (typeof delta['content'] === 'string') {
            choice.text += delta['content'];
            this.bytes += Buffer.byteLength(delta['content']);
          }
        }
        break;
      }
      case 'text':
        if (typeof c['text'] === 'string') {
          choice.text += c['text'];
          this.bytes += Buffer.byteLength(c['text']);
        }
        break;
      case 'generate': {
        const ids = c['token_ids'];
        if (Array.isArray(ids)) {
          for (const id of ids) choice.tokenIds.push(id);
          this.bytes += 16 * ids.length;
        }
        break;
      }
    }
    if (c['finish_reason'] !== null && c['finish_reason'] !== undefined) choice.finishReason = c['finish_reason'];
  }

  private addResponses(frame: SseFrame): void {
    const type = frame['type'];
    if (type === 'response.output_text.delta') {
      if (typeof frame['delta'] === 'string') {
        this.responseText += frame['delta'];
        this.bytes += Buffer.byteLength(frame['delta']);
      }
      return;
    }
    const response = frame['response'];
    if (type === 'response.completed' && isObj(response)) {
      this.completed = response;
      this.responseText = '';
      return;
    }
    if (isObj(response)) {
      if (this.envelope.id === undefined && nonEmptyString(response['id'])) this.envelope.id = response['id'];
      if (this.envelope.model === undefined && nonEmptyString(response['model'])) this.envelope.model = response['model'];
    }
  }

  /** The reply object (§12.3.7). */
  result(): Obj {
    const sorted = [...this.choices.entries()].sort((a, b) => a[0] - b[0]);
    switch (this.shape) {
      case 'chat': {
        const out = this.envelope.fields('chat.completion');
        out['choices'] = sorted.map(([index, c]) => ({
          index,
          logprobs: null,
          finish_reason: c.finishReason,
          message: { role: c.role || 'assistant', content: c.text },
        }));
        if (this.usage) out['usage'] = this.usage;
        return out;
      }
      case 'text': {
        const out = this.envelope.fields(this.envelope.object ?? 'text_completion');
        out['choices'] = sorted.map(([index, c]) => ({ index, logprobs: null, finish_reason: c.finishReason, text: c.text }));
        if (this.usage) out['usage'] = this.usage;
        return out;
      }
      case 'generate': {
        const out: Obj = {};
        if (this.requestId !== undefined) out['request_id'] = this.requestId;
        out['prompt_logprobs'] = null;
        out['kv_transfer_params'] = null;
        out['choices'] = sorted.map(([index, c]) => ({ index, logprobs: null, finish_reason: c.finishReason, token_ids: c.tokenIds }));
        return out;
      }
      case 'responses': {
        if (this.completed !== undefined) return this.completed as Obj;
        const out: Obj = {
          status: 'completed',
          output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: this.responseText }] }],
        };
        if (this.envelope.id !== undefined) out['id'] = this.envelope.id;
        if (this.envelope.model !== undefined) out['model'] = this.envelope.model;
        return out;
      }
    }
  }
}
