/**
 * SSE frames of a forced stream (reference §12.3.4): line based (LF or CRLF); only `data:` lines
 * count, their payload trimmed; empty payloads, `event:`, `id:`, comments and blank lines are
 * ignored; `[DONE]` ends the stream; every other payload must be a JSON object. The end of the body
 * without `[DONE]` is a normal end. A line longer than `maxLineBytes` is a ceiling abort: nothing
 * unbounded is ever held.
 */
import { ForceStreamError } from './errors';

export type SseFrame = Record<string, unknown>;

const LF = 0x0a;
const DATA = Buffer.from('data:');

export async function* sseFrames(body: AsyncIterable<Buffer>, maxLineBytes: number): AsyncGenerator<SseFrame, void, undefined> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const iterator = body[Symbol.asyncIterator]();
  try {
    for (;;) {
      let next: IteratorResult<Buffer>;
      try {
        next = await iterator.next();
      } catch (err) {
        throw new ForceStreamError('read', `read upstream: ${err instanceof Error ? err.message : String(err)}`);
      }
      if (next.done) break;
      let chunk = next.value;
      let nl = chunk.indexOf(LF);
      while (nl !== -1) {
        const head = chunk.subarray(0, nl);
        if (pendingBytes + head.length > maxLineBytes) throw lineTooLong(maxLineBytes);
        const line = pendingBytes === 0 ? head : Buffer.concat([...pending, head], pendingBytes + head.length);
        pending = [];
        pendingBytes = 0;
        const frame = parseLine(line);
        if (frame === 'done') return;
        if (frame) yield frame;
        chunk = chunk.subarray(nl + 1);
        nl = chunk.indexOf(LF);
      }
      if (chunk.length > 0) {
        pendingBytes += chunk.length;
        if (pendingBytes > maxLineBytes) throw lineTooLong(maxLineBytes);
        pending.push(chunk);
      }
    }
    if (pendingBytes > 0) {
      const frame = parseLine(Buffer.concat(pending, pendingBytes));
      if (frame && frame !== 'done') yield frame;
    }
  } finally {
    // Stop reading (and release the side call) on every early exit.
    await iterator.return?.().catch(() => undefined);
  }
}

function lineTooLong(max: number): ForceStreamError {
  return new ForceStreamError('ceiling', `SSE line exceeds ${max} bytes`);
}

function parseLine(raw: Buffer): SseFrame | 'done' | null {
  const line = raw.length > 0 && raw[raw.length - 1] === 0x0d ? raw.subarray(0, raw.length - 1) : raw;
  if (line.length < DATA.length || !line.subarray(0, DATA.length).equals(DATA)) return null;
  const payload = line.subarray(DATA.length).toString('utf8').trim();
  if (payload === '') return null;
  if (payload === '[DONE]') return 'done';
  let value: unknown;
  try {
    value = JSON.parse(payload);
  } catch (err) {
    throw new ForceStreamError('parse', `parse frame: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new ForceStreamError('parse', 'parse frame: not a JSON object');
  }
  return value as SseFrame;
}
