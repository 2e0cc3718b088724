/**
 * `server.stream_idle_timeout`: a stream on which Envoy owes us the request (headers, body) but
 * sends nothing for that long is ended (DEADLINE_EXCEEDED), its exchange aborted once, and released.
 * Waiting on our own pipeline, relaying a response, or an answered stream Envoy keeps open is no
 * idleness of Envoy's and must never be cut.
 */
import * as grpc from '@grpc/grpc-js';
import { parseConfig } from '../../src/config/config';
import { ConfigError } from '../../src/config/errors';
import type { ExtProcServer } from '../../src/extproc';
import { EnvoyClient, headerEntries } from './envoy-client';
import { eventually, respond, ScriptedHandler } from './fake-handler';
import { chatHeaders, startHarness, useServiceWithSimulator, type Harness } from './harness';

// Wide enough that a busy CI machine's event-loop stalls cannot fake an idle gap in the tests below.
const IDLE_MS = 400;
const FD = { requestBodyMode: 'FULL_DUPLEX_STREAMED' } as const;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('idle deadline (scripted handler)', () => {
  let h: Harness;
  let server: ExtProcServer;
  let client: EnvoyClient;
  let handler: ScriptedHandler;

  beforeAll(async () => {
    h = await startHarness('full_duplex', 1024 * 1024, { streamIdleTimeoutMs: IDLE_MS });
    ({ server, client, handler } = h);
  });
  afterAll(() => h.close());
  afterEach(async () => {
    await eventually(() => server.activeStreams() === 0, 'no stream in flight after the test');
  });

  it('a client silent after the headers: the stream is ended, its exchange aborted once, and released', async () => {
    handler.reset(() => ({}));
    const s = client.open();
    s.sendHeaders(chatHeaders(), FD);
    s.sendBody(Buffer.from('{"model":'), false);
    const ex = await handler.firstExchange();
    expect(await ex.aborted.promise).toMatch(new RegExp(`nothing for ${IDLE_MS} ms`));
    expect((await s.status).code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(await s.rest()).toEqual([]);
    await eventually(() => server.activeStreams() === 0, 'the idle stream released');
    expect(ex.aborts).toHaveLength(1);
    expect(ex.bodies).toHaveLength(0);
  });

  it('a stream that never sends its headers is ended too', async () => {
    handler.reset(() => ({}));
    const s = client.open();
    await eventually(() => server.activeStreams() === 1, 'the stream open on the server');
    expect((await s.status).code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(handler.heads).toHaveLength(0);
  });

  it('body chunks arriving more often than the deadline keep a slow upload alive', async () => {
    handler.reset(() => ({}));
    const s = client.open();
    s.sendHeaders(chatHeaders(), FD);
    const parts = ['{"model":"m",', '"a":1,', '"b":2,', '"c":3,', '"d":4,', '"e":5,', '"f":6}'];
    // 7 x 100 ms: well past the 400 ms deadline in all, never 400 ms without a message.
    for (let i = 0; i < parts.length; i++) {
      await sleep(IDLE_MS * 0.25);
      s.sendBody(Buffer.from(parts[i]!), i === parts.length - 1);
    }
    const head = await s.next();
    expect(head.response).toBe('request_headers');
    const ex = handler.exchanges[0]!;
    expect(ex.bodies[0]!.toString()).toBe(parts.join(''));
    s.end();
    const rest = await s.rest();
    expect(rest.map((m) => m.response)).toEqual(['request_body']);
    expect((await s.status).code).toBe(grpc.status.OK);
    expect(ex.aborts).toEqual([]);
  });

  it('a decision that takes longer than the deadline is waited for (the wait is on us, not Envoy)', async () => {
    handler.reset(() => ({
      decide: async () => {
        await sleep(IDLE_MS * 3);
        return respond(200, { 'content-type': 'application/json' }, Buffer.from('{"ok":true}'));
      },
    }));
    const s = client.open();
    s.sendHeaders(chatHeaders(), FD);
    s.sendBody(Buffer.from('{}'), true);
    const msg = await s.next();
    expect(msg.response).toBe('immediate_response');
    expect(msg.immediate_response!.body.toString()).toBe('{"ok":true}');
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    expect(handler.exchanges[0]!.aborts).toEqual([]);
  });

  it('a streamed immediate response relayed for longer than the deadline is not cut', async () => {
    async function* slow(): AsyncGenerator<Buffer> {
      for (let i = 0; i < 4; i++) {
        await sleep(IDLE_MS * 0.75);
        yield Buffer.from(`data: ${i}\n\n`);
      }
    }
    handler.reset(() => ({ decide: () => respond(200, { 'content-type': 'text/event-stream' }, slow()) }));
    const s = client.open();
    s.sendHeaders(chatHeaders(), FD);
    s.sendBody(Buffer.from('{}'), true);
    expect((await s.next()).streamed_immediate_response?.response).toBe('headers_response');
    let body = '';
    for (;;) {
      const chunk = (await s.next()).streamed_immediate_response!.body_response!;
      body += chunk.body.toString();
      if (chunk.end_of_stream) break;
    }
    expect(body).toBe('data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\n');
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    expect(handler.exchanges[0]!.aborts).toEqual([]);
  });

  it('an answered stream Envoy keeps open (the response is streaming to the client) is left alone', async () => {
    handler.reset(() => ({}));
    const s = client.open();
    s.sendHeaders(chatHeaders(), FD);
    s.sendBody(Buffer.from('{}'), true);
    expect((await s.next()).response).toBe('request_headers');
    expect((await s.next()).response).toBe('request_body');
    await sleep(IDLE_MS * 3);
    expect(server.activeStreams()).toBe(1);
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    expect(handler.exchanges[0]!.aborts).toEqual([]);
  });
});

describe('idle deadline: off', () => {
  it('0 never ends a silent stream', async () => {
    const h = await startHarness('full_duplex', 1024 * 1024, { streamIdleTimeoutMs: 0 });
    const { server, client, handler } = h;
    handler.reset(() => ({}));
    try {
      const s = client.open();
      s.sendHeaders(chatHeaders(), FD);
      await handler.firstExchange();
      await sleep(300);
      expect(server.activeStreams()).toBe(1);
      expect(handler.exchanges[0]!.aborts).toEqual([]);
      s.cancel();
      await s.status;
    } finally {
      await h.close();
    }
  });
});

describe.each(['FULL_DUPLEX_STREAMED', 'BUFFERED'] as const)('idle deadline with the real pipeline (%s)', (mode) => {
  const env = useServiceWithSimulator({ stream_idle_timeout: `${IDLE_MS}ms` });

  it('a prefill slower than the deadline is waited for, and the request is forwarded', async () => {
    env.sim.clear();
    env.sim.setFaults([{ delayMs: IDLE_MS * 4, times: 1 }]);
    const s = env.client.open();
    const body = Buffer.from(JSON.stringify({ model: 'm', prompt: [1, 2, 3], max_tokens: 1 }));
    s.sendHeaders(
      [
        [':method', 'POST'],
        [':path', '/v1/completions'],
        ['content-type', 'application/json'],
        ['content-length', String(body.length)],
      ],
      { requestBodyMode: mode },
    );
    if (mode === 'BUFFERED') expect((await s.next()).response).toBe('request_headers');
    s.sendBody(body, true);
    // The forward's mutation: on the held headers reply (full duplex) or the body reply (buffered).
    const answer = await s.next();
    const mutation =
      mode === 'BUFFERED' ? answer.request_body?.response?.header_mutation : answer.request_headers?.response?.header_mutation;
    expect(headerEntries(mutation)['epp-profile']).toBe('decode');
    expect(env.sim.requests).toHaveLength(1);
    expect(env.sim.requests[0]!.closedEarly).toBe(false);
    s.end();
    await s.rest();
    expect((await s.status).code).toBe(grpc.status.OK);
    await eventually(() => env.service.activeStreams() === 0, 'the stream closed');
  });
});

describe('server.stream_idle_timeout (config)', () => {
  const idle = (v: unknown) => parseConfig({ server: { stream_idle_timeout: v } }, {}).server.streamIdleTimeoutMs;

  it("defaults to Envoy's 600s; 0 turns it off", () => {
    expect(parseConfig({}, {}).server.streamIdleTimeoutMs).toBe(600_000);
    expect(idle('0')).toBe(0);
    expect(idle('300ms')).toBe(300);
    expect(parseConfig({}, { COORDINATOR_SERVER_STREAM_IDLE_TIMEOUT: '90s' }).server.streamIdleTimeoutMs).toBe(90_000);
  });

  it('refuses values under 100ms or over 24h, and non-durations', () => {
    for (const bad of ['50ms', '1ns', '25h', 'soon', 600]) expect(() => idle(bad)).toThrow(ConfigError);
    expect(() => idle('50ms')).toThrow('server.stream_idle_timeout: expected 0 (off) or a duration from 100ms to 24h, got "50ms"');
  });
});
