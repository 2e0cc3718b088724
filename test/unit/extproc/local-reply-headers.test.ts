/**
 * One hop-by-hop list: an immediate response and a streamed local reply skip the same headers,
 * the connection-level ones (pipeline/hop-by-hop.ts) and content-length, since Envoy frames local
 * replies itself.
 */
import { immediateResponse } from '../../../src/extproc/responses';
import { streamedHeadersResponse } from '../../../src/extproc/streamed-response';
import { HOP_BY_HOP_HEADERS } from '../../../src/pipeline/hop-by-hop';

const headers: Record<string, string> = { 'content-type': 'text/plain', 'x-kept': 'yes', 'content-length': '999' };
for (const name of HOP_BY_HOP_HEADERS) headers[name] = 'v';

describe('local reply headers', () => {
  it('an immediate response keeps the ordinary headers and skips every hop-by-hop one and content-length', () => {
    const msg = immediateResponse(200, headers, Buffer.from('hi'), { metadata: undefined }) as unknown as {
      immediate_response: { headers: { set_headers: Array<{ header: { key: string } }> } };
    };
    const names = msg.immediate_response.headers.set_headers.map((h) => h.header.key).sort();
    expect(names).toEqual(['content-type', 'x-kept']);
  });

  it('a streamed local reply skips the very same headers (and keeps only its own :status pseudo-header)', () => {
    const msg = streamedHeadersResponse(200, { ...headers, ':path': '/x' }, { metadata: undefined }) as unknown as {
      streamed_immediate_response: { headers_response: { headers: { headers: Array<{ key: string }> } } };
    };
    const list = msg.streamed_immediate_response.headers_response.headers.headers;
    expect(list.map((h) => h.key).sort()).toEqual([':status', 'content-type', 'x-kept']);
  });
});
