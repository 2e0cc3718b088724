/** Leg-log redaction as upstream redacts (`pkg/coordinator/common/httplog/redact.go`), and Go duration strings for `pipeline step timings`. */
import { redactBody, redactHeaders } from '../../../src/pipeline/redact';
import fc from 'fast-check';
import { goDuration } from '../../../src/pipeline/go-duration';
import { timingMetadata } from '../../../src/pipeline/exchange-base';
import { fuzzSeed } from '../../fuzz/support/settings';

describe('redactHeaders', () => {
  it('credentials are [REDACTED] whatever their case; names lower-cased; long values cut', () => {
    const long = 'x'.repeat(300);
    expect(
      redactHeaders({
        Authorization: 'Bearer t',
        'X-API-Key': 'k',
        cookie: 'c',
        'Set-Cookie': 's',
        'x-auth-token': 'a',
        'Proxy-Authorization': 'p',
        'X-Long': long,
        'epp-profile': 'prefill',
      }),
    ).toEqual({
      authorization: '[REDACTED]',
      'x-api-key': '[REDACTED]',
      cookie: '[REDACTED]',
      'set-cookie': '[REDACTED]',
      'x-auth-token': '[REDACTED]',
      'proxy-authorization': '[REDACTED]',
      'x-long': `${'x'.repeat(256)}...[truncated]`,
      'epp-profile': 'prefill',
    });
  });
});

describe('redactBody', () => {
  it('strings over 50 chars become [base64], [url] or ...; short ones stay', () => {
    const body = JSON.stringify({
      a: `data:image/png;base64,${'A'.repeat(60)}`,
      b: `https://example.test/${'p'.repeat(60)}`,
      c: 'y'.repeat(51),
      d: 'y'.repeat(50),
      n: 3,
    });
    expect(redactBody(Buffer.from(body))).toEqual({ a: '[base64]', b: '[url]', c: '...', d: 'y'.repeat(50), n: 3 });
  });
  it('arrays over 10 keep 10 and count the rest; depth 32 is [truncated]; parts are read as one body', () => {
    expect(redactBody([Buffer.from('{"ids":['), Buffer.from('1,2,3,4,5,6,7,8,9,10,11,12]}')])).toEqual({
      ids: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, '... +2 more'],
    });
    let deep: unknown = 'leaf';
    for (let i = 0; i < 40; i++) deep = { d: deep };
    let v = redactBody(JSON.stringify(deep)) as Record<string, unknown>;
    for (let i = 0; i < 31; i++) v = v['d'] as Record<string, unknown>;
    expect(v['d']).toBe('[truncated]');
  });
  it('a non-JSON body is cut at 200 characters', () => {
    expect(redactBody('z'.repeat(201))).toBe(`${'z'.repeat(200)}...`);
    expect(redactBody('not json')).toBe('not json');
  });
});

describe('goDuration', () => {
  it.each([
    [0, '0s'],
    [0.0005, '500ns'],
    [0.85, '850µs'],
    [1.234567, '1.234567ms'],
    [2500, '2.5s'],
    [90_000, '1m30s'],
    [3_723_000, '1h2m3s'],
  ])('%p ms -> %s', (ms, want) => {
    expect(goDuration(ms)).toBe(want);
  });
});

describe('goDuration in integer nanoseconds', () => {
  /** The float formatting it replaced: `toFixed`, trailing zeros and a bare point dropped. */
  const trimmed = (n: number, d: number): string => n.toFixed(d).replace(/\.?0+$/, '');
  function reference(ms: number): string {
    const ns = Math.round(ms * 1e6);
    if (ns < 1_000) return `${ns}ns`;
    if (ns < 1_000_000) return `${trimmed(ns / 1_000, 3)}µs`;
    if (ns < 1_000_000_000) return `${trimmed(ns / 1_000_000, 6)}ms`;
    return `${trimmed(ns / 1e9, 9)}s`;
  }

  it('prints what toFixed printed, below a minute, for any duration', () => {
    fc.assert(
      fc.property(fc.double({ min: 1e-7, max: 59_999, noNaN: true }), (ms) => {
        expect(goDuration(ms)).toBe(reference(ms));
      }),
      { numRuns: 5000, seed: fuzzSeed() },
    );
  });

  it('keeps the leading zeros of a fraction and drops its trailing ones', () => {
    expect(goDuration(1.000001)).toBe('1.000001ms');
    expect(goDuration(0.00105)).toBe('1.05µs');
    expect(goDuration(61_000.5)).toBe('1m1.0005s');
    expect(goDuration(3_600_000)).toBe('1h0m0s');
  });

  it('the access-log step list prints each step rounded to hundredths, as String(round(ms)) did', () => {
    fc.assert(
      fc.property(fc.array(fc.double({ min: 0, max: 1e7, noNaN: true }), { minLength: 1, maxLength: 6 }), (ms) => {
        const timings = ms.map((v, i) => ({ step: `s${i}`, ms: v }));
        const want = timings.map((t) => `${t.step}:${Math.round(t.ms * 100) / 100}`).join(',');
        expect(timingMetadata(timings)['steps']).toBe(want);
      }),
      { numRuns: 2000, seed: fuzzSeed() },
    );
  });
});
