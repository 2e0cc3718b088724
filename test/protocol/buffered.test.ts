/** BUFFERED: headers acknowledged at once; one body message carries the whole body. */
import { headerEntries, structToJson } from './envoy-client';
import { forward, respond } from './fake-handler';
import { chatHeaders, NS, patternBytes, startHarness, type Harness } from './harness';

let h: Harness;
beforeAll(async () => {
  h = await startHarness('buffered');
});
afterAll(async () => {
  await h.close();
});
beforeEach(() => h.handler.reset());

describe('BUFFERED forward', () => {
  it('acknowledges headers at once, then rewrites headers and body with an exact content-length', async () => {
    const newBody = Buffer.from('{"model":"m","prompt_token_ids":[1,2,3],"kv_transfer_params":{"x":"é"}}');
    h.handler.reset(() => ({
      decide: () =>
        forward({
          setHeaders: { 'epp-profile': 'decode', 'content-length': '1' },
          removeHeaders: ['x-drop-me', 'content-length'],
          body: newBody,
          metadata: { path: 'cascade', tokens: 3 },
        }),
    }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    const first = await s.next();
    expect(first.response).toBe('request_headers');
    expect(first.request_headers!.response).toBeNull();
    expect(h.handler.exchanges[0]!.bodies).toEqual([]); // answered before any body arrived

    const original = Buffer.from('{"model":"m","messages":[{"role":"user","content":"hi"}]}');
    s.sendBody(original, true);
    const msg = await s.next();
    expect(msg.response).toBe('request_body');
    const common = msg.request_body!.response!;
    expect(common.clear_route_cache).toBe(true);
    expect(headerEntries(common.header_mutation)).toEqual({
      'content-length': String(newBody.length),
      'epp-profile': 'decode',
    });
    expect(common.header_mutation!.remove_headers).toEqual(['x-drop-me']);
    expect(common.body_mutation!.mutation).toBe('body');
    expect(common.body_mutation!.body!.equals(newBody)).toBe(true);
    expect(structToJson(msg.dynamic_metadata)).toEqual({ [NS]: { path: 'cascade', tokens: 3 } });
    expect(h.handler.exchanges[0]!.bodies[0]!.equals(original)).toBe(true);

    s.end();
    expect(await s.rest()).toEqual([]);
    expect((await s.status).code).toBe(0);
  });

  it('leaves body and content-length alone when the decision keeps the body', async () => {
    h.handler.reset(() => ({ decide: () => forward({ setHeaders: { 'epp-profile': 'decode' } }) }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    await s.next();
    s.sendBody(Buffer.from('{}'), true);
    const common = (await s.next()).request_body!.response!;
    expect(common.body_mutation).toBeNull();
    expect(headerEntries(common.header_mutation)).toEqual({ 'epp-profile': 'decode' });
    expect(common.header_mutation!.remove_headers).toEqual([]);
    expect(common.clear_route_cache).toBe(true);
    s.end();
    await s.status;
  });

  it('answers trailers after the body reply when the body came with end_of_stream false', async () => {
    h.handler.reset(() => ({ decide: async () => forward({ body: Buffer.from('new') }) }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    s.sendBody(Buffer.from('old'), false);
    s.sendTrailers();
    const kinds = [(await s.next()).response, (await s.next()).response, (await s.next()).response];
    expect(kinds).toEqual(['request_headers', 'request_body', 'request_trailers']);
    expect(h.handler.exchanges[0]!.bodies[0]!.toString()).toBe('old');
    s.end();
    await s.status;
  });

  it('takes a 10 MiB body in one message and sends a 10 MiB body back', async () => {
    const original = patternBytes(10 * 1024 * 1024);
    const newBody = patternBytes(10 * 1024 * 1024 + 77);
    h.handler.reset(() => ({ decide: () => forward({ body: newBody }) }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    await s.next();
    s.sendBody(original, true);
    const common = (await s.next()).request_body!.response!;
    expect(headerEntries(common.header_mutation)['content-length']).toBe(String(newBody.length));
    expect(common.body_mutation!.body!.equals(newBody)).toBe(true);
    expect(h.handler.exchanges[0]!.bodies[0]!.equals(original)).toBe(true);
    s.end();
    await s.status;
  });
});

describe('BUFFERED respond', () => {
  it('answers the body with an immediate_response', async () => {
    h.handler.reset(() => ({
      decide: () =>
        respond(502, { 'content-type': 'application/json' }, Buffer.from('{"error":{"code":502}}'), { error_class: 'upstream' }),
    }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    await s.next();
    s.sendBody(Buffer.from('{}'), true);
    const msg = await s.next();
    const ir = msg.immediate_response!;
    expect(ir.status!.code).toBe('BadGateway');
    expect(headerEntries(ir.headers)).toEqual({ 'content-type': 'application/json' });
    expect(ir.body.toString()).toBe('{"error":{"code":502}}');
    expect(structToJson(msg.dynamic_metadata)).toEqual({ [NS]: { error_class: 'upstream' } });
    s.end();
    expect(await s.rest()).toEqual([]);
  });

  it('answers a body above the exchange limit with tooLarge()', async () => {
    h.handler.reset(() => ({ maxBodyBytes: 1000 }));
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    await s.next();
    s.sendBody(patternBytes(1001), true);
    const ir = (await s.next()).immediate_response!;
    expect(ir.status!.code).toBe('PayloadTooLarge');
    expect(h.handler.exchanges[0]!.tooLargeCalls).toEqual([1001]);
    expect(h.handler.exchanges[0]!.bodies).toEqual([]);
    s.end();
    await s.status;
  });

  it('maps statuses Envoy does not define: 499 -> 400, 101 -> 200', async () => {
    for (const [status, expected] of [
      [499, 'BadRequest'],
      [101, 'OK'],
    ] as const) {
      h.handler.reset(() => ({ decide: () => respond(status, {}, Buffer.alloc(0)) }));
      const s = h.client.open();
      s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
      await s.next();
      s.sendBody(Buffer.from('{}'), true);
      expect((await s.next()).immediate_response!.status!.code).toBe(expected);
      s.end();
      await s.status;
    }
  });
});

describe('BUFFERED without a body or without an exchange', () => {
  it('processes a headers-only request in the headers reply', async () => {
    h.handler.reset(() => ({ decide: () => forward({ setHeaders: { 'epp-profile': 'decode' } }) }));
    const s = h.client.open();
    s.sendHeaders(
      [
        [':method', 'GET'],
        [':path', '/v1/models'],
        ['content-length', '0'],
      ],
      { endOfStream: true, requestBodyMode: 'BUFFERED' },
    );
    const common = (await s.next()).request_headers!.response!;
    expect(headerEntries(common.header_mutation)).toEqual({ 'epp-profile': 'decode' });
    // content-length is left alone when there is no body to change.
    expect(common.header_mutation!.remove_headers).toEqual([]);
    expect(common.clear_route_cache).toBe(true);
    expect(h.handler.exchanges[0]!.bodies[0]!.length).toBe(0);
    s.end();
    await s.status;
  });

  it('answers a headers-only request with an immediate_response when the decision is respond', async () => {
    h.handler.reset(() => ({ decide: () => respond(404, {}, Buffer.from('nope')) }));
    const s = h.client.open();
    s.sendHeaders(
      [
        [':method', 'GET'],
        [':path', '/nope'],
      ],
      { endOfStream: true, requestBodyMode: 'BUFFERED' },
    );
    const ir = (await s.next()).immediate_response!;
    expect(ir.status!.code).toBe('NotFound');
    expect(ir.body.toString()).toBe('nope');
    s.end();
    await s.status;
  });

  it('passes through when the handler declines: empty answers to headers, body and trailers', async () => {
    const s = h.client.open();
    s.sendHeaders(chatHeaders(), { requestBodyMode: 'BUFFERED' });
    s.sendBody(Buffer.from('{"a":1}'), false);
    s.sendTrailers();
    const all = [await s.next(), await s.next(), await s.next()];
    expect(all.map((m) => m.response)).toEqual(['request_headers', 'request_body', 'request_trailers']);
    expect(all[0]!.request_headers!.response).toBeNull();
    expect(all[1]!.request_body!.response).toBeNull();
    expect(all[2]!.request_trailers!.header_mutation).toBeNull();
    s.end();
    expect(await s.rest()).toEqual([]);
  });
});
