/** `pipeline.forward_response_headers` and `x-peer-topology` (issue #15 item 3): validation and the per-request relay. */
import { ConfigError } from '../../../src/config/errors';
import { parseConfig } from '../../../src/config/config';
import { DEFAULT_FORWARD_RESPONSE_HEADERS, mostFrequent, parseForwardResponseHeaders } from '../../../src/pipeline/response-headers';
import { RequestContext } from '../../../src/pipeline/context';
import { headersOf } from '../../../src/pipeline/side-call';
import { silentLogger } from '../../../src/observability/logger';
import { relayedResponseHeaders } from '../../../src/steps/conditional-decode';

const ctxWith = (headers: Record<string, string>, relay: readonly string[] = DEFAULT_FORWARD_RESPONSE_HEADERS) =>
  new RequestContext({
    requestId: 'r',
    originalPath: '/v1/chat/completions',
    headers,
    body: {},
    signal: new AbortController().signal,
    log: silentLogger(),
    relayResponseHeaders: relay,
  });

describe('parseForwardResponseHeaders', () => {
  it("absent means upstream's default; [] disables; names are trimmed and lower-cased", () => {
    expect(parseForwardResponseHeaders(undefined)).toEqual(['x-llm-d-disagg-revision']);
    expect(parseForwardResponseHeaders([])).toEqual([]);
    expect(parseForwardResponseHeaders([' X-Disagg-Slice '])).toEqual(['x-disagg-slice']);
  });
  it.each([
    [['x-a', ''], 'pipeline.forward_response_headers[1]'],
    [['content-type'], 'non-forwardable header "content-type"'],
    [['Transfer-Encoding'], 'non-forwardable header "transfer-encoding"'],
    [['x-a', 'X-A'], 'duplicate header "x-a"'],
    [['bad header'], 'non-forwardable header "bad header"'],
    ['x-a', 'a list of header names'],
  ])('%j is a start-up error naming %s', (raw, text) => {
    expect(() => parseForwardResponseHeaders(raw)).toThrow(ConfigError);
    expect(() => parseForwardResponseHeaders(raw)).toThrow(text);
  });
  it('the loader keeps the key (no "unknown key" warning) and hands it over as written', () => {
    const cfg = parseConfig({ pipeline: { forward_response_headers: ['x-a'] } }, {});
    expect(cfg.pipeline.forwardResponseHeaders).toEqual(['x-a']);
    expect(cfg.warnings.join('\n')).not.toContain('forward_response_headers');
  });
});

describe('relay on one request', () => {
  it('client values of listed headers are never forwarded, and are removed from the decode request', () => {
    const ctx = ctxWith({ 'x-llm-d-disagg-revision': 'client', 'x-peer-topology': 'evil', other: 'kept' });
    expect(ctx.forwardedHeaders()).toEqual({ other: 'kept' });
    expect(ctx.discardedClientHeaders().sort()).toEqual(['x-llm-d-disagg-revision', 'x-peer-topology']);
  });

  it("an answer's value reaches later side calls and the decode request; the topology only decode", () => {
    const ctx = ctxWith({ 'x-llm-d-disagg-revision': 'client' });
    ctx.captureResponseHeaders(headersOf({ 'x-llm-d-disagg-revision': 'rev-1', 'x-peer-topology': 'host=a' }));
    ctx.capturePeerTopology(headersOf({ 'x-peer-topology': 'host=a' }));
    expect(ctx.forwardedHeaders()).toEqual({ 'x-llm-d-disagg-revision': 'rev-1' });
    expect(ctx.relayedHeaders()).toEqual({ 'x-llm-d-disagg-revision': 'rev-1', 'x-peer-topology': 'host=a' });
    expect(ctx.discardedClientHeaders()).toEqual([]);
  });

  it('a fan-out takes the most frequent value; a tie goes to the first seen', () => {
    const ctx = ctxWith({});
    ctx.captureFanOutHeaders([
      headersOf({ 'x-llm-d-disagg-revision': 'b' }),
      headersOf({}),
      headersOf({ 'x-llm-d-disagg-revision': 'a' }),
      headersOf({ 'x-llm-d-disagg-revision': 'a' }),
    ]);
    expect(ctx.relayedHeaders()).toEqual({ 'x-llm-d-disagg-revision': 'a' });
    expect(mostFrequent(['x', 'y', 'y', 'x'])).toBe('x');
    expect(mostFrequent([])).toBeUndefined();
  });

  it('a value no HTTP client may send is not relayed', () => {
    const ctx = ctxWith({});
    ctx.captureResponseHeaders(headersOf({ 'x-llm-d-disagg-revision': 'a\u0001b' }));
    expect(ctx.relayedHeaders()).toEqual({});
  });
});

describe('answers the service relays itself (conditional-decode hit)', () => {
  it('internal headers are stripped, the rest kept', () => {
    expect(
      relayedResponseHeaders({ 'x-peer-topology': 'host=a', 'epp-profile': 'decode', 'x-inference-pod': 'p', connection: 'close' }),
    ).toEqual({ 'x-inference-pod': 'p' });
  });
});
