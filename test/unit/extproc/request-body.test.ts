/** The FULL_DUPLEX_STREAMED body collector, without gRPC. */
import { RequestBody } from '../../../src/extproc/request-body';

const b = (s: string): Buffer => Buffer.from(s);

describe('RequestBody', () => {
  it('hands one chunk over as it came (no copy), then forgets it', () => {
    const body = new RequestBody();
    const chunk = b('{"model":"m"}');
    expect(body.add(chunk, 100)).toBe(true);
    const taken = body.take(true);
    expect(taken).toEqual({ kind: 'whole', body: chunk });
    expect(taken.kind === 'whole' && taken.body).toBe(chunk);
    expect(body.take(true)).toEqual({ kind: 'whole', body: Buffer.alloc(0) });
  });

  it('keeps several chunks apart for an exchange that reads parts, else concatenates them once', () => {
    const parts = new RequestBody();
    for (const s of ['ab', '', 'cd', 'e']) parts.add(b(s), 100);
    const taken = parts.take(true);
    expect(taken.kind).toBe('parts');
    if (taken.kind !== 'parts') return;
    expect(taken.parts.map((p) => p.toString())).toEqual(['ab', 'cd', 'e']); // empty chunks are not kept
    expect(taken.length).toBe(5);

    const whole = new RequestBody();
    for (const s of ['ab', 'cd', 'e']) whole.add(b(s), 100);
    expect(whole.take(false)).toEqual({ kind: 'whole', body: b('abcde') });
  });

  it('refuses the chunk that goes over the limit, drops what it had, and counts every byte received', () => {
    const body = new RequestBody();
    expect(body.add(b('12345'), 8)).toBe(true);
    expect(body.add(b('678'), 8)).toBe(true); // exactly at the limit
    expect(body.add(b('9'), 8)).toBe(false);
    expect(body.received).toBe(9);
    expect(body.take(true)).toEqual({ kind: 'whole', body: Buffer.alloc(0) });
  });

  it('counts a BUFFERED body without keeping it; drop() forgets collected chunks', () => {
    const body = new RequestBody();
    body.countWhole(42);
    expect(body.received).toBe(42);
    const other = new RequestBody();
    other.add(b('abc'), 10);
    other.drop();
    expect(other.take(false)).toEqual({ kind: 'whole', body: Buffer.alloc(0) });
    expect(other.received).toBe(3);
  });
});
