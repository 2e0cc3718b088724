/** Leg-log redaction as upstream redacts (reference §5.10), and Go duration strings for `pipeline step timings`. */
import { redactBody, redactHeaders } from '../../../src/pipeline/redact';
import { goDuration } from '../../../src/pipeline/go-duration';

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
