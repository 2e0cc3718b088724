/**
 * gRPC's message framing on HTTP/2 DATA (the "Length-Prefixed-Message" of PROTOCOL-HTTP2.md): one
 * byte of compressed flag, four bytes of big-endian length, then the message. DATA frames do not
 * line up with messages: a frame may carry several messages, and a message (a BUFFERED body) may
 * span thousands of frames, so a message is gathered in its parts and joined once.
 */

export const FRAME_HEADER_BYTES = 5;

/** What a message handed to {@link FrameReader.push}'s callback is. */
export interface Frame {
  /** The compressed flag: we never accept compression (grpc-accept-encoding: identity). */
  readonly compressed: boolean;
  readonly message: Buffer;
}

const EMPTY = Buffer.alloc(0);

export class FrameReader {
  /** Header bytes of the current message read so far (the header may span chunks). */
  private headFill = 0;
  /** Bytes of the current message still to come; -1 while its header is being read. */
  private need = -1;
  private compressed = false;
  private length = 0;
  private parts: Buffer[] = [];

  /** `maxMessageBytes`: a longer message is refused from its header, before any of it is held. */
  constructor(private readonly maxMessageBytes: number) {}

  /**
   * Feeds one DATA chunk; calls `onFrame` for each message it completes, in order. `onFrame` returns
   * false when the call has ended: the rest of the chunk is dropped. Returns an error text when a
   * header announces an oversize message (the call must then end: the reader is out of step).
   */
  push(chunk: Buffer, onFrame: (frame: Frame) => boolean): string | undefined {
    let at = 0;
    while (at < chunk.length) {
      if (this.need < 0) {
        // Byte by byte, with no buffer of its own: a reader per stream, and a Buffer is a typed
        // array with a backing store (the header almost never spans chunks).
        while (this.headFill < FRAME_HEADER_BYTES && at < chunk.length) {
          const b = chunk[at++]!;
          if (this.headFill++ === 0) {
            this.compressed = b !== 0;
            this.length = 0;
          } else {
            this.length = this.length * 256 + b;
          }
        }
        if (this.headFill < FRAME_HEADER_BYTES) return undefined;
        this.headFill = 0;
        if (this.length > this.maxMessageBytes) {
          return `Received message larger than max (${this.length} vs. ${this.maxMessageBytes})`;
        }
        this.need = this.length;
        if (this.need > 0) continue;
        this.need = -1;
        if (!onFrame({ compressed: this.compressed, message: EMPTY })) return undefined;
        continue;
      }
      const take = Math.min(this.need, chunk.length - at);
      const part = chunk.subarray(at, at + take);
      at += take;
      this.need -= take;
      if (this.need > 0) {
        this.parts.push(part);
        continue;
      }
      this.need = -1;
      let message = part;
      if (this.parts.length > 0) {
        this.parts.push(part);
        message = Buffer.concat(this.parts, this.length);
        this.parts = [];
      }
      if (!onFrame({ compressed: this.compressed, message })) return undefined;
    }
    return undefined;
  }

  /** Drops a half-read message (the call ended). */
  drop(): void {
    this.parts = [];
    this.need = -1;
    this.headFill = 0;
  }
}

/** One message framed for the wire: a single buffer, so that it leaves in one write. */
export function frameMessage(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, FRAME_HEADER_BYTES);
  return out;
}
