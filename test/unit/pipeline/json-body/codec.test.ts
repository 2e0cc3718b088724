/** The body codec: one parse that keeps big strings as the client's bytes, and the splice back. */
import { BadRequestError } from '../../../../src/pipeline/errors';
import {
  PLAIN_BODY_CODEC,
  PlaceholderLeakError,
  byteLengthOf,
  concatParts,
  parseJsonBody,
  type ParsedJsonBody,
} from '../../../../src/pipeline/json-body';

const MIN = 1024; // a small threshold keeps the bodies small; the default is 32 KiB

/** Every placeholder in a value (or serialised bytes) starts like this. */
const MARK = '\u0000epd:';
const MARK_JSON = '\\u0000epd:';

function chunked(buf: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < buf.length; i += size) out.push(buf.subarray(i, i + size));
  return out;
}

/** Replaces every placeholder string in a parsed value by its real text. */
function realValue(v: unknown, p: ParsedJsonBody): unknown {
  if (typeof v === 'string') return p.codec.text(v);
  if (Array.isArray(v)) return v.map((x) => realValue(x, p));
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[p.codec.text(k)] = realValue(x, p);
    return out;
  }
  return v;
}

/** What a plain `JSON.parse` of the whole body says: the value, or that it is a 400. */
function plain(raw: Buffer): { ok: true; value: unknown } | { ok: false } {
  try {
    const v: unknown = JSON.parse(raw.toString('utf8'));
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return { ok: false };
    return { ok: true, value: v };
  } catch {
    return { ok: false };
  }
}

function expectSameAsPlainParse(raw: Buffer | Buffer[]): void {
  const whole = Buffer.isBuffer(raw) ? raw : Buffer.concat(raw);
  const want = plain(whole);
  if (!want.ok) {
    expect(() => parseJsonBody(raw, MIN)).toThrow(new BadRequestError('invalid JSON body'));
    return;
  }
  const got = parseJsonBody(raw, MIN);
  expect(realValue(got.body, got)).toEqual(want.value);
  // Serialising the untouched body gives what JSON.stringify gives for the plain parse.
  expect(concatParts(got.codec.serialize(got.body)).toString('utf8')).toBe(JSON.stringify(want.value));
}

const big = (n: number, ch = 'Q'): string => ch.repeat(n);
const BASE64 = Buffer.alloc(6000, 0xa7).toString('base64');

describe('parseJsonBody', () => {
  it('keeps a big string as a placeholder and splices the client bytes back byte for byte, without copying them', () => {
    const raw = Buffer.from(JSON.stringify({ model: 'm', token_ids: [1, 2, 3], features: { kwargs_data: { image: [BASE64, null] } } }));
    const p = parseJsonBody(raw, MIN);
    const kw = (p.body['features'] as any).kwargs_data.image[0] as string;
    expect(kw.startsWith(MARK)).toBe(true);
    expect(kw.length).toBeLessThan(64);
    expect(p.codec.text(kw)).toBe(BASE64);

    const parts = p.codec.serialize(p.body);
    expect(concatParts(parts).equals(raw)).toBe(true);
    expect(byteLengthOf(parts)).toBe(raw.length);
    // The big part is the client's own memory, not a copy.
    const bigPart = parts.find((x) => x.length > BASE64.length)!;
    expect(bigPart.buffer).toBe(raw.buffer);
  });

  it('gives the same value as a plain parse for strings of every kind, whole or in chunks', () => {
    const body = {
      ascii: big(3000),
      utf8: 'é€😀'.repeat(700),
      escaped: `${big(2000)}\\"quoted"\n`,
      small: 'x',
      nested: [{ a: BASE64 }, [BASE64, 'y', 1.5, true, null]],
      [big(1500, 'k')]: 'a key this long stays a key',
      ids: Array.from({ length: 800 }, (_, i) => i),
      control: `\u0001${big(1500)}`,
    };
    const raw = Buffer.from(JSON.stringify(body));
    expectSameAsPlainParse(raw);
    // Chunk cuts fall anywhere, including inside multi-byte characters.
    for (const size of [1, 7, 100, 997, 4096]) expectSameAsPlainParse(chunked(raw, size));
    const pretty = Buffer.from(JSON.stringify(body, null, 2));
    expectSameAsPlainParse(pretty);
    expectSameAsPlainParse(chunked(pretty, 333));
  });

  it('serialises a body carrying a big string byte for byte when its chunks are the client buffers', () => {
    const raw = Buffer.from(JSON.stringify({ a: 'é€😀'.repeat(900), b: BASE64 }));
    const p = parseJsonBody(chunked(raw, 1000), MIN);
    expect(concatParts(p.codec.serialize(p.body)).equals(raw)).toBe(true);
    expect(p.codec.text(p.body['a'] as string)).toBe('é€😀'.repeat(900));
  });

  it('leaves big object keys alone, so a repeated key still keeps its last value', () => {
    const key = big(2000, 'k');
    expectSameAsPlainParse(Buffer.from(`{"a":1,"${key}":1,"${key}":2,"b":"${BASE64}"}`));
    expectSameAsPlainParse(Buffer.from(`{"a":1,"${key}" : 1, "${key}"\n:\t2}`));
  });

  it('stays exact next to long runs of whitespace or backslashes (past the scan limits)', () => {
    const pad = ' \n'.repeat(3000);
    expectSameAsPlainParse(Buffer.from(`{"a":${pad}"${BASE64}"${pad},"b":"${BASE64}"}`));
    expectSameAsPlainParse(Buffer.from(`{"a":"${'\\'.repeat(5000)}","b":"${BASE64}","c":"${'\\'.repeat(5000)}\\"${big(2000)}"}`));
    expectSameAsPlainParse(chunked(Buffer.from(`{"a":"${'\\'.repeat(5000)}"${big(3000)}","b":"${BASE64}"}`), 999));
  });

  it('takes the plain path for bodies without big strings', () => {
    const raw = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }));
    const p = parseJsonBody(raw, MIN);
    expect(p.codec).toBe(PLAIN_BODY_CODEC);
    expect(p.body).toEqual(JSON.parse(raw.toString()));
  });

  it('does not take a long token-id array between two strings for a string', () => {
    const raw = Buffer.from(JSON.stringify({ a: 'x', token_ids: Array.from({ length: 2000 }, (_, i) => i), b: 'y', kw: BASE64 }));
    const p = parseJsonBody(raw, MIN);
    expect(p.body['token_ids']).toHaveLength(2000);
    expect(p.codec.text(p.body['kw'] as string)).toBe(BASE64);
    expect(concatParts(p.codec.serialize(p.body)).equals(raw)).toBe(true);
  });

  it.each([
    ['a raw control byte inside a big string', `{"a":"${big(3000)}\u0001"}`],
    ['a raw newline inside a big string', `{"a":"${big(3000)}\n"}`],
    ['an unterminated big string', `{"a":"${big(3000)}`],
    ['a trailing comma', `{"a":"${big(3000)}",}`],
    ['two values without a comma', `{"a":"${big(3000)}" "b":1}`],
    ['a string right after a value', `{"a":1"${big(3000)}"}`],
    ['a top-level string', `"${big(3000)}"`],
    ['a top-level array', `["${big(3000)}"]`],
    ['a big string where a key belongs', `{"a":1,"${big(3000)}"}`],
    ['a bad escape after a big string', `{"a":"${big(3000)}\\x"}`],
    ['garbage after the object', `{"a":"${big(3000)}"}x`],
    ['an empty body', ''],
  ])('answers 400 invalid JSON body, as a plain parse would, for %s', (_what, text) => {
    const raw = Buffer.from(text);
    expect(plain(raw).ok).toBe(false);
    expect(() => parseJsonBody(raw, MIN)).toThrow(new BadRequestError('invalid JSON body'));
    expect(() => parseJsonBody(chunked(raw, 500), MIN)).toThrow(new BadRequestError('invalid JSON body'));
  });

  it('agrees with a plain parse on every single-byte corruption of a body with big strings', () => {
    const raw = Buffer.from(JSON.stringify({ m: 'model', kw: [BASE64.slice(0, 1500), null], s: { t: big(1200) }, n: [1, 2] }));
    // Deterministic: a small LCG picks the positions and bytes.
    let seed = 12345;
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const bytes = [0x22, 0x5c, 0x2c, 0x3a, 0x7b, 0x7d, 0x5b, 0x5d, 0x0a, 0x01, 0x20, 0x41, 0xc3, 0xff];
    // The interesting positions: the quotes and brackets around the big strings.
    const positions = [...raw.keys()].filter((i) => (raw[i] !== 0x41 && raw[i] !== 0x51 && raw[i] !== 0x70) || rand(40) === 0);
    for (const at of positions) {
      for (const mode of ['replace', 'insert', 'delete'] as const) {
        const b = bytes[rand(bytes.length)]!;
        let mutated: Buffer;
        if (mode === 'replace') {
          mutated = Buffer.from(raw);
          mutated[at] = b;
        } else if (mode === 'insert') mutated = Buffer.concat([raw.subarray(0, at), Buffer.from([b]), raw.subarray(at)]);
        else mutated = Buffer.concat([raw.subarray(0, at), raw.subarray(at + 1)]);
        expectSameAsPlainParse(mutated);
      }
    }
  });

  it('never takes a client string for a placeholder', () => {
    const forged = `${MARK}00000000000000000000000000000000:0`;
    const raw = Buffer.from(JSON.stringify({ a: forged, b: BASE64 }));
    const p = parseJsonBody(raw, MIN);
    expect(p.body['a']).toBe(forged);
    expect(p.codec.text(forged)).toBe(forged);
    expect(concatParts(p.codec.serialize(p.body)).equals(raw)).toBe(true);
    // Each request draws its own nonce: a placeholder of one body means nothing to another.
    const other = parseJsonBody(raw, MIN);
    expect(other.codec.text(p.body['b'] as string)).toBe(p.body['b']);
  });

  it('refuses to serialise a placeholder a step altered, so none ever leaves the service', () => {
    const p = parseJsonBody(Buffer.from(JSON.stringify({ b: BASE64 })), MIN);
    const ph = p.body['b'] as string;
    expect(ph.startsWith(MARK)).toBe(true);
    for (const altered of [
      `data:${ph}`,
      `${ph}x`,
      ph.slice(1),
      ph.slice(0, -1),
      `"${ph}`,
      ph.slice(0, 24),
      ph.slice(0, MARK.length + 16),
      ph.slice(MARK.length),
    ]) {
      expect(() => p.codec.serialize({ u: altered })).toThrow(PlaceholderLeakError);
      expect(() => p.codec.serialize({ [altered]: 1 })).toThrow(PlaceholderLeakError);
    }
    expect(concatParts(p.codec.serialize({ u: ph })).toString()).not.toContain(MARK_JSON);
    // Carried whole it splices anywhere, as a key too.
    const moved = concatParts(p.codec.serialize({ x: [ph], [ph]: ph })).toString();
    expect(JSON.parse(moved)).toEqual({ x: [BASE64], [BASE64]: BASE64 });
  });

  it('reads the head of a big string without breaking a character at the cut', () => {
    const text = `data:image/png;base64,${'é'.repeat(2000)}`;
    const p = parseJsonBody(Buffer.from(JSON.stringify({ u: text })), MIN);
    const ph = p.body['u'] as string;
    for (const n of [0, 1, 5, 22, 23, 24, 100, 1999, 5000]) expect(p.codec.textHead(ph, n)).toBe(text.slice(0, n));
    expect(PLAIN_BODY_CODEC.textHead('abcdef', 3)).toBe('abc');
  });
});
