/**
 * gRPC message framing on the lean transport (src/extproc/grpc-framing.ts): Envoy's DATA frames do
 * not line up with messages, so whatever the cuts (inside a 5-byte header, inside a message, several
 * messages in one chunk), the reader hands on the same messages, in order.
 */
import fc from 'fast-check';
import { FrameReader, frameMessage, type Frame } from '../../../src/extproc/grpc-framing';
import { fuzzSeed } from '../../fuzz/support/settings';

function header(compressed: boolean, length: number): Buffer {
  const h = Buffer.alloc(5);
  h[0] = compressed ? 1 : 0;
  h.writeUInt32BE(length, 1);
  return h;
}

/** Feeds `wire` cut at `cuts` (positions), returning the frames read and any error text. */
function read(wire: Buffer, cuts: readonly number[], max = 1 << 20): { frames: Frame[]; error: string | undefined } {
  const reader = new FrameReader(max);
  const frames: Frame[] = [];
  let error: string | undefined;
  let from = 0;
  for (const at of [...new Set(cuts)].sort((a, b) => a - b).concat(wire.length)) {
    if (at < from) continue;
    error ??= reader.push(wire.subarray(from, at), (f) => (frames.push(f), true));
    from = at;
  }
  return { frames, error };
}

describe('FrameReader', () => {
  it('reads the same messages whatever the chunk boundaries, headers cut included', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ compressed: fc.boolean(), bytes: fc.uint8Array({ maxLength: 300 }) }), { minLength: 1, maxLength: 6 }),
        fc.array(fc.nat(), { maxLength: 40 }),
        (messages, rawCuts) => {
          const wire = Buffer.concat(messages.map((m) => Buffer.concat([header(m.compressed, m.bytes.length), Buffer.from(m.bytes)])));
          const { frames, error } = read(
            wire,
            rawCuts.map((c) => c % (wire.length + 1)),
          );
          expect(error).toBeUndefined();
          expect(frames.map((f) => ({ compressed: f.compressed, bytes: [...f.message] }))).toEqual(
            messages.map((m) => ({ compressed: m.compressed, bytes: [...m.bytes] })),
          );
        },
      ),
      { numRuns: 500, seed: fuzzSeed() },
    );
  });

  it('reads a length written in all four bytes, one byte per chunk', () => {
    const body = Buffer.alloc(0x010203, 7);
    const wire = Buffer.concat([header(false, body.length), body]);
    const { frames } = read(wire, [1, 2, 3, 4, 5]);
    expect(frames).toHaveLength(1);
    expect(frames[0]!.message.length).toBe(0x010203);
  });

  it('refuses a message longer than the limit from its header, before holding any of it', () => {
    const wire = header(false, 0xffffffff);
    expect(read(wire, [2], 1000).error).toBe('Received message larger than max (4294967295 vs. 1000)');
  });

  it('frames what it reads', () => {
    const msg = Buffer.from('hello');
    const { frames } = read(frameMessage(msg), [3]);
    expect(frames).toEqual([{ compressed: false, message: msg }]);
  });
});
