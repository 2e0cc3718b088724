/**
 * Collects a FULL_DUPLEX_STREAMED request body as Envoy sends it, up to a limit. Pure: no gRPC,
 * no timers. Chunks are kept as they came, so a large body is never copied whole unless the
 * exchange needs it in one buffer.
 */
const EMPTY = Buffer.alloc(0);

/** A collected body: one buffer, or the chunks in order when there are several. */
export type CollectedBody =
  { readonly kind: 'whole'; readonly body: Buffer } | { readonly kind: 'parts'; readonly parts: Buffer[]; readonly length: number };

export class RequestBody {
  private chunks: Buffer[] = [];
  private bytes = 0;

  /** Bytes received so far, including those of a chunk that went over the limit. */
  get received(): number {
    return this.bytes;
  }

  /** Adds one chunk; false (and everything dropped) when the body is now over `limit`. */
  add(chunk: Buffer, limit: number): boolean {
    this.bytes += chunk.length;
    if (this.bytes > limit) {
      this.chunks = [];
      return false;
    }
    if (chunk.length > 0) this.chunks.push(chunk);
    return true;
  }

  /** Counts a body that arrived in one message (BUFFERED) without keeping it. */
  countWhole(length: number): void {
    this.bytes = length;
  }

  /**
   * Hands the body over and forgets it. Several chunks stay apart when `keepParts` (the exchange
   * reads parts); else they are concatenated once.
   */
  take(keepParts: boolean): CollectedBody {
    const chunks = this.chunks;
    this.chunks = [];
    if (chunks.length > 1 && keepParts) return { kind: 'parts', parts: chunks, length: this.bytes };
    if (chunks.length === 0) return { kind: 'whole', body: EMPTY };
    return { kind: 'whole', body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.bytes) };
  }

  /** Drops what was collected (the stream is over, or the answer no longer needs it). */
  drop(): void {
    this.chunks = [];
  }
}
