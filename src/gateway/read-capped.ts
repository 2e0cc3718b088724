import type { Readable } from 'node:stream';

/** Drops a body we will not read; its abort error is expected and must not surface as unhandled. */
export function discard(stream: Readable): void {
  stream.on('error', () => undefined);
  stream.destroy();
}

/**
 * Reads at most `cap` bytes of a response body; `over` when it had more (the stream is then
 * discarded). A body that arrives in one chunk is returned without a copy.
 */
export async function readCapped(stream: Readable, cap: number): Promise<{ data: Buffer; over: boolean }> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const b = chunk as Buffer;
    if (size + b.length > cap) {
      parts.push(b.subarray(0, cap - size));
      size = cap;
      discard(stream);
      return { data: Buffer.concat(parts, size), over: true };
    }
    parts.push(b);
    size += b.length;
  }
  return { data: parts.length === 1 ? parts[0]! : Buffer.concat(parts, size), over: false };
}
