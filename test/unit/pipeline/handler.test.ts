import { PipelineHandler } from '../../../src/pipeline/handler';
import type { Decision, RespondDecision, ForwardDecision } from '../../../src/pipeline/decision';
import { BadRequestError, MediaUnavailableError, UpstreamError, UpstreamInvalidError, TransportError } from '../../../src/pipeline/errors';
import type { RequestContext } from '../../../src/pipeline/context';
import type { Step } from '../../../src/pipeline/step';
import { silentLogger } from '../../../src/observability/logger';

function step(type: string, run: (ctx: RequestContext) => Promise<unknown> | unknown): Step {
  return { type, execute: async (ctx) => (await run(ctx)) as never };
}

const decodeStep = step('decode', (ctx) => {
  ctx.body['kv_transfer_params'] = { do_remote_prefill: true };
  ctx.decode = { headers: { 'epp-profile': 'decode', 'x-request-id': ctx.requestId, 'content-type': 'application/json' } };
});

function handler(steps: Step[], maxBodyBytes = 1024) {
  return new PipelineHandler({ steps, maxBodyBytes, log: silentLogger() });
}

async function run(steps: Step[], body: string, headers: Record<string, string> = {}, path = '/v1/chat/completions'): Promise<Decision> {
  const ex = handler(steps).begin({ method: 'POST', path, headers });
  if (!ex) throw new Error('expected an exchange');
  return ex.complete(Buffer.from(body));
}

/** A chat body with the shape the pipeline checks before any step (request-shape.ts). */
const MESSAGES = [{ role: 'user', content: 'hi' }];
const chatBody = (extra: Record<string, unknown> = {}): string => JSON.stringify({ messages: MESSAGES, ...extra });

function json(d: RespondDecision): { error: { message: string; type: string; code: number } } {
  return JSON.parse((d.body as Buffer).toString());
}

describe('PipelineHandler', () => {
  test.each([
    ['GET', '/v1/chat/completions'],
    ['POST', '/v1/models'],
    ['POST', '/v1/embeddings?x=1'],
    ['GET', '/v1/models/org/model-1.5'],
  ])('%s %s goes on to decode as it came, with EPP-Profile: decode (upstream passthrough)', async (method, path) => {
    let ran = false;
    const ex = handler([step('decode', () => void (ran = true))]).begin({ method, path, headers: { 'x-request-id': 'p-1' } })!;
    const d = (await ex.complete(Buffer.from('{"a":1}'))) as ForwardDecision;
    expect(d).toMatchObject({
      kind: 'forward',
      setHeaders: { 'epp-profile': 'decode', 'x-request-id': 'p-1' },
      removeHeaders: [],
      body: null,
    });
    expect(d.metadata['path_taken']).toBe('passthrough');
    expect(ran).toBe(false);
  });

  test('the three inference paths are processed, with or without a query string', () => {
    for (const path of ['/v1/chat/completions', '/v1/completions?x=1', '/inference/v1/generate']) {
      expect(handler([decodeStep]).begin({ method: 'POST', path, headers: {} })).not.toBeNull();
    }
  });

  test.each(['{', 'null', '[1]', '"text"', '42', '', '{"a":1} trailing'])('body %j is a 400 invalid JSON body', async (body) => {
    const d = (await run([decodeStep], body, { 'x-request-id': 'abc-1' })) as RespondDecision;
    expect(d.kind).toBe('respond');
    expect(d.status).toBe(400);
    expect(d.headers['content-type']).toBe('application/json');
    expect(json(d).error).toEqual({
      message: 'invalid JSON body (request_id: abc-1)',
      type: 'invalid_request_error',
      param: null,
      code: 400,
    });
    expect(d.metadata).toMatchObject({ request_id: 'abc-1', path_taken: 'error', error_class: 'bad_request', status: 400 });
  });

  test('a completed cascade forwards the mutated body, serialised once, with the decode headers', async () => {
    const d = (await run([decodeStep], chatBody({ model: 'm', stream: true }), { 'x-request-id': 'req-7' })) as ForwardDecision;
    expect(d.kind).toBe('forward');
    expect(d.setHeaders).toEqual({ 'epp-profile': 'decode', 'x-request-id': 'req-7', 'content-type': 'application/json' });
    expect(JSON.parse(d.body!.toString())).toEqual({
      messages: MESSAGES,
      model: 'm',
      stream: true,
      kv_transfer_params: { do_remote_prefill: true },
    });
    expect(d.metadata).toMatchObject({ request_id: 'req-7', path_taken: 'cascade', token_count: 0 });
    expect(typeof (d.metadata['step_ms'] as Record<string, number>)['decode']).toBe('number');
    expect(d.metadata['steps']).toMatch(/^decode:\d/);
  });

  test('an unsafe or overlong x-request-id is replaced by a UUID and never reflected', async () => {
    for (const bad of ['a b', 'x\r\ny', 'a'.repeat(129), '<script>']) {
      const d = (await run(
        [
          step('render', () => {
            throw new BadRequestError('nope');
          }),
        ],
        chatBody(),
        { 'x-request-id': bad },
      )) as RespondDecision;
      const id = d.metadata['request_id'] as string;
      expect(id).toMatch(/^[0-9a-f-]{36}$/);
      expect(json(d).error.message).toBe(`nope (request_id: ${id})`);
      expect((d.body as Buffer).toString()).not.toContain(bad);
    }
  });

  test('an upstream 4xx keeps its status, names the step, and hides the upstream body', async () => {
    const d = (await run(
      [
        step('prefill', () => {
          throw new UpstreamError('prefill', 422, 'SECRET upstream text');
        }),
      ],
      chatBody(),
      { 'x-request-id': 'r1' },
    )) as RespondDecision;
    expect(d.status).toBe(422);
    expect(json(d).error.message).toBe('prefill rejected the request: HTTP 422 (request_id: r1)');
    expect((d.body as Buffer).toString()).not.toContain('SECRET');
    expect(d.metadata).toMatchObject({ error_step: 'prefill', error_class: 'upstream_4xx', upstream_status: 422 });
  });

  test.each([
    ['an upstream 5xx', new UpstreamError('prefill', 500, 'SECRET'), 'upstream_5xx'],
    ['a transport failure', new TransportError('render', 'request failed: ECONNREFUSED'), 'transport'],
    ['an unusable upstream answer', new UpstreamInvalidError('render returned 2 mm_hashes but expected 1'), 'upstream_invalid'],
    ['an image that could not be fetched', new MediaUnavailableError('downloading http://img/x: HTTP 404', 404), 'media_unavailable'],
    ['any other error (our own bug)', new TypeError("cannot read properties of undefined (reading 'x')"), 'internal'],
  ])('%s is a 502 with a generic message', async (_label, err, cls) => {
    const d = (await run(
      [
        step('prefill', () => {
          throw err;
        }),
      ],
      chatBody(),
      { 'x-request-id': 'r2' },
    )) as RespondDecision;
    expect(d.status).toBe(502);
    expect(json(d).error).toEqual({ message: 'internal error (request_id: r2)', type: 'api_error', param: null, code: 502 });
    expect(d.metadata['error_class']).toBe(cls);
  });

  test('a step that answers the client ends the pipeline; later steps do not run', async () => {
    const later = jest.fn();
    const d = (await run(
      [
        step('conditional-decode', () => ({
          respond: { status: 200, headers: { 'content-type': 'text/plain' }, body: Buffer.from('hit') },
          cacheHit: true,
        })),
        step('decode', later),
      ],
      chatBody(),
    )) as RespondDecision;
    expect(d).toMatchObject({ kind: 'respond', status: 200 });
    expect(d.metadata['path_taken']).toBe('cache_hit');
    expect(later).not.toHaveBeenCalled();
  });

  test("a step's own answer (not a served worker answer) is path_taken step_response", async () => {
    const later = jest.fn();
    const d = (await run(
      [step('async-broker', () => ({ respond: { status: 429, headers: {}, body: Buffer.from('{}') } })), step('decode', later)],
      chatBody(),
    )) as RespondDecision;
    expect(d).toMatchObject({ kind: 'respond', status: 429 });
    expect(d.metadata).toMatchObject({ path_taken: 'step_response', status: 429 });
    expect(later).not.toHaveBeenCalled();
  });

  test('a pipeline that produces no decode request lets the request pass unmodified', async () => {
    const d = (await run([step('render', () => undefined)], chatBody({ a: 1 }))) as ForwardDecision;
    expect(d).toMatchObject({ kind: 'forward', body: null, setHeaders: {}, removeHeaders: [] });
    expect(d.metadata['path_taken']).toBe('passthrough');
  });

  test('tooLarge is a 413 with an OpenAI-style body', () => {
    const ex = handler([decodeStep], 10).begin({ method: 'POST', path: '/v1/completions', headers: { 'x-request-id': 'big' } })!;
    expect(ex.maxBodyBytes).toBe(10);
    const d = ex.tooLarge(11) as RespondDecision;
    expect(d.status).toBe(413);
    expect(json(d).error.message).toBe('request body too large (request_id: big)');
  });

  test('abort() cancels the in-flight step and the pipeline stops there', async () => {
    const after = jest.fn();
    const ex = handler([
      step('prefill', (ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(new Error('aborted'))))),
      step('decode', after),
    ]).begin({ method: 'POST', path: '/v1/chat/completions', headers: {} })!;
    const pending = ex.complete(Buffer.from(chatBody()));
    ex.abort('client went away');
    const d = (await pending) as RespondDecision;
    expect(d.status).toBe(502);
    expect(after).not.toHaveBeenCalled();
  });

  test('token and multimodal counts reach the metadata', async () => {
    const d = await run(
      [
        step('render', (ctx) => {
          ctx.tokenIds = [1, 2, 3];
          ctx.multimodalEntries = [{ index: 0 }];
        }),
        decodeStep,
      ],
      chatBody(),
    );
    expect(d.metadata).toMatchObject({ token_count: 3, mm_entries: 1 });
  });
});

describe('routes and stamped headers', () => {
  const route = {
    method: 'GET',
    match: (path: string) => {
      const m = /^\/v1\/requests\/([^/]+)$/.exec(path);
      return m ? { id: m[1]! } : null;
    },
    handle: async (req: { params: Record<string, string>; headers: Record<string, string> }) => ({
      status: 200,
      headers: { 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ id: req.params['id'], team: req.headers['x-team'] })),
    }),
  };

  test('a step-registered route answers its own method and path; others pass through', async () => {
    const h = new PipelineHandler({ steps: [decodeStep], routes: [route], maxBodyBytes: 1024, log: silentLogger() });
    const ex = h.begin({ method: 'GET', path: '/v1/requests/abc?x=1', headers: { 'x-team': 't1' } })!;
    const d = (await ex.complete(Buffer.alloc(0))) as RespondDecision;
    expect(d.status).toBe(200);
    expect(JSON.parse((d.body as Buffer).toString())).toEqual({ id: 'abc', team: 't1' });
    expect(d.metadata['path_taken']).toBe('route');
    for (const [method, path] of [
      ['DELETE', '/v1/requests/abc'],
      ['GET', '/v1/requests/a/b'],
    ] as const) {
      const other = (await h.begin({ method, path, headers: {} })!.complete(Buffer.alloc(0))) as ForwardDecision;
      expect(other.metadata['path_taken']).toBe('passthrough');
    }
  });

  test('headers stamped by a step reach later side calls and the forwarded request', async () => {
    let seenBySecond: Record<string, string> = {};
    const d = (await run(
      [
        step('async-broker', (ctx) => ctx.stampHeader('X-Objective', 'reserved')),
        step('prefill', (ctx) => {
          seenBySecond = ctx.forwardedHeaders();
        }),
        decodeStep,
      ],
      chatBody(),
      { 'x-objective': 'client-chosen' },
    )) as ForwardDecision;
    expect(seenBySecond['x-objective']).toBe('reserved');
    expect(d.setHeaders['x-objective']).toBe('reserved');
  });
});

describe('the finished signal (what a per-request hold, such as a quota slot, waits on)', () => {
  test('is live while the steps run and aborts with "decided" once the decision is made', async () => {
    let during: { aborted: boolean; signal: AbortSignal } | undefined;
    const d = await run(
      [step('hold', (ctx) => void (during = { aborted: ctx.finished.aborted, signal: ctx.finished })), decodeStep],
      chatBody(),
    );
    expect(d.kind).toBe('forward');
    expect(during!.aborted).toBe(false);
    expect(during!.signal.aborted).toBe(true);
    expect(during!.signal.reason).toBe('decided');
  });

  test('aborts with the stream-end reason when the client leaves while a step waits', async () => {
    let signal: AbortSignal | undefined;
    let entered!: () => void;
    const inStep = new Promise<void>((r) => (entered = r));
    const waits = step('wait', (ctx) => {
      signal = ctx.finished;
      entered();
      return new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    });
    const ex = handler([waits, decodeStep]).begin({ method: 'POST', path: '/v1/chat/completions', headers: {} })!;
    const decided = ex.complete(Buffer.from(chatBody()));
    await inStep;
    expect(signal!.aborted).toBe(false);
    ex.abort('client gone');
    await decided;
    expect(signal!.reason).toBe('client gone');
  });

  test('asked for only after the request ended, it is already aborted, with the first reason', async () => {
    let kept: RequestContext | undefined;
    const ex = handler([step('keep', (ctx) => void (kept = ctx)), decodeStep]).begin({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: {},
    })!;
    await ex.complete(Buffer.from(chatBody()));
    ex.abort('stream closed afterwards');
    expect(kept!.finished.aborted).toBe(true);
    expect(kept!.finished.reason).toBe('decided');
  });
});
