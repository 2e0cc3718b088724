/**
 * Header fuzz cases for the trust-boundary suites (issue #12): gateway headers with hostile values
 * (the latin-1 fairness id among them) mixed with the generic hostile header lists of test/fuzz,
 * sent as raw HTTP/1.1 bytes (no client library in between to refuse or re-encode them), and the
 * answer the documented policy gives each (docs/hardening.md, "Trust boundary").
 */
import { connect } from 'node:net';
import fc from 'fast-check';
import { GATEWAY_HEADERS } from '../../src/pipeline/header-policy';
import { headerList } from '../fuzz/support/arbitraries';
import { LATIN1_VALUE } from './trust-cases';

/** Framing and hop-by-hop headers: Envoy's codec judges those (test/fuzz/http.fuzz.test.ts raw cases), not the policy. */
const FRAMING = new Set([
  'content-length',
  'transfer-encoding',
  'connection',
  'host',
  'te',
  'content-type',
  'upgrade',
  'expect',
  'keep-alive',
  'proxy-connection',
]);
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;
const VISIBLE = /^[\x20-\x7e\t]*$/;
/** A value Envoy's codec takes as it is: no control byte, CR or LF. */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** One raw HTTP/1.1 exchange; the status of the answer, 0 when Envoy closed without one. */
export function rawExchange(port: number, text: string, timeoutMs = 20_000): Promise<number> {
  return new Promise((resolve) => {
    const sock = connect({ host: '127.0.0.1', port });
    let seen = Buffer.alloc(0);
    const done = (): void => {
      sock.destroy();
      resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(seen.toString('latin1'))?.[1] ?? 0));
    };
    sock.setTimeout(timeoutMs, done);
    sock.on('data', (d: Buffer) => {
      if (seen.length < 4096) seen = Buffer.concat([seen, d]);
      if (seen.includes('\r\n')) done();
    });
    sock.on('error', done);
    sock.on('close', done);
    sock.write(text, 'latin1');
  });
}

/** A header case: the lines sent, and what the documented policy answers. */
export interface HeaderCase {
  readonly method: 'POST' | 'GET';
  readonly path: string;
  readonly lines: ReadonlyArray<readonly [string, string]>;
}

/**
 * The answer a case must get. Exact where the policy decides: `200` when every line is a
 * well-formed header whose value is visible ASCII or belongs to a gateway header (removed whatever
 * it holds); `400` when a well-formed non-gateway header has other bytes (our 400 names it). Only
 * the first value of a name counts: that is the one the service reads. A line Envoy's codec may
 * judge first (a name that is not a token, a control byte, CR or LF in a value) may get its 4xx or
 * go through: `any` answer below 500. A header name with `_` is refused by Envoy (`refused`: its
 * 400 or a closed connection, status 0).
 */

/** Whether `status` (0 = closed without an answer) is what {@link expectedFor} allows; `ok200` is the clean request's status. */
export function answerFits(expected: ReturnType<typeof expectedFor>, status: number, ok200: number): boolean {
  if (expected === 'any') return status < 500;
  if (expected === 'refused') return status === 400 || status === 0;
  return status === (expected === 200 ? ok200 : expected);
}
export function expectedFor(c: HeaderCase): 200 | 400 | 'refused' | 'any' {
  const seen = new Set<string>();
  let expected: 200 | 400 = 200;
  for (const [name, value] of c.lines) {
    const lower = name.toLowerCase();
    if (!TOKEN.test(lower) || !FIELD_VALUE.test(value)) return 'any';
    // envoy/ and the EPP topology: headers_with_underscores_action REJECT_REQUEST. Envoy's 400, or
    // (in the EPP topology, whose EPP filter also processes responses) a closed connection.
    if (lower.includes('_')) return 'refused';
    if (seen.has(lower)) continue;
    seen.add(lower);
    if (!GATEWAY_HEADERS.has(lower) && !VISIBLE.test(value) && lower !== 'x-request-id') expected = 400;
  }
  return expected;
}

/**
 * Header bytes per case. Above the workers' own 16 KB limit a worker answers 431, or drops a
 * passthrough connection (Envoy's 503): a known gap, docs/hardening.md and test/fuzz/http.fuzz.test.ts.
 */
const MAX_HEADER_BYTES = 12_000;
const headerBytes = (lines: ReadonlyArray<readonly [string, string]>) => lines.reduce((n, [k, v]) => n + k.length + v.length + 4, 0);

const gatewayName = fc.constantFrom(...GATEWAY_HEADERS.keys());
/** The latin-1 fairness id, UTF-8 bytes, routing-looking values, any printable text, and rarely control bytes. */
const hostileValue = fc.oneof(
  { weight: 3, arbitrary: fc.constant(LATIN1_VALUE) },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '\u00c3\u00a9t\u00c3\u00a9',
      '\u00ff',
      'spoofed',
      'decode',
      'prefill',
      '127.0.0.1:1',
      'reserve-endpoint',
      'if-available',
      '0',
      '-1',
      'a'.repeat(4096),
    ),
  },
  { weight: 3, arbitrary: fc.stringMatching(/^[\x20-\x7e]{0,64}$/) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary-ascii', maxLength: 40 }) },
);
/** A well-formed header that is not a gateway header, with a hostile value (a non-ASCII one gets our 400). */
const otherHeader = fc.tuple(
  fc.stringMatching(/^x-[a-z0-9-]{1,20}$/).filter((n) => !GATEWAY_HEADERS.has(n)),
  hostileValue,
);

/**
 * 1-6 gateway headers with hostile values, 0-2 other well-formed headers with hostile values, and
 * up to 3 lines of test/fuzz's generic hostile header lists (odd names, CR/LF/NUL, huge values).
 */
export const headerCase: fc.Arbitrary<HeaderCase> = fc
  .record({
    method: fc.constantFrom<'POST' | 'GET'>('POST', 'POST', 'POST', 'GET'),
    gateway: fc.array(fc.tuple(gatewayName, hostileValue), { minLength: 1, maxLength: 6 }),
    other: fc.array(otherHeader, { maxLength: 2 }),
    generic: fc.oneof(
      { weight: 2, arbitrary: fc.constant([] as Array<[string, string]>) },
      { weight: 1, arbitrary: headerList.map((l) => l.slice(0, 3)) },
    ),
  })
  .map(({ method, gateway, other, generic }) => ({
    method,
    path: method === 'GET' ? '/v1/models' : '/v1/chat/completions',
    lines: [...gateway, ...other, ...generic].filter(([n]) => !FRAMING.has(n.toLowerCase())),
  }))
  .filter((c) => headerBytes(c.lines) <= MAX_HEADER_BYTES);

export function rawRequest(c: HeaderCase, id: string, model: string): string {
  const body = c.method === 'POST' ? JSON.stringify({ model, messages: [{ role: 'user', content: `fuzz ${id}` }], max_tokens: 4 }) : '';
  const head = [
    `${c.method} ${c.path} HTTP/1.1`,
    'host: trust.local',
    'content-type: application/json',
    `x-request-id: ${id}`,
    ...c.lines.map(([n, v]) => `${n}: ${v}`),
    `content-length: ${Buffer.byteLength(body)}`,
  ];
  return `${head.join('\r\n')}\r\n\r\n${body}`;
}
