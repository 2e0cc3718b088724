/**
 * Issue 19 items 3 and 4 through the real Envoy and a real Redis: a request the steps cannot read,
 * or one past a `pipeline.request_limits` bound, gets a 400 naming the field before any side call
 * (no simulator sees a request), also when it asks to be queued (`X-AP-Mode: enqueue`: nothing is
 * written to Redis); a value exactly at a limit is forwarded.
 */
import { request } from 'undici';
import { RedisServer } from '../support/redis';
import { defaultSteps, ROLES, stackConfigDoc, startStack, type Stack } from '../support/stack';

const MODEL = 'sim-model';
const QUEUE = 'validation-queue';
/** A limit set lower than its default, to show the configured value is the one applied. */
const MAX_TOKENS = 64;

let redisServer: RedisServer;
let stack: Stack;
let seq = 0;
const nextId = (what: string): string => `val-${what}-${process.pid}-${++seq}`;

interface Answer {
  readonly status: number;
  readonly json: { error?: { message?: string; type?: string; code?: number } } & Record<string, unknown>;
}

async function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await request(stack.publicUrl + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-team': 'acme', ...headers },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: JSON.parse(text) as Answer['json'] };
}

/** Every request the simulators received (render, encode, prefill, decode). */
const seenByWorkers = () => ROLES.flatMap((role) => stack.sims[role].requests.map((r) => `${role} ${r.method} ${r.path}`));

async function redisKeys(): Promise<string[]> {
  const c = redisServer.client();
  try {
    return (await c.keys('*')).sort();
  } finally {
    c.disconnect();
  }
}

/** The OpenAI error shape, our message and nothing reached a worker. */
function expectRefused(res: Answer, message: string, id: string): void {
  expect({ status: res.status, json: res.json }).toEqual({
    status: 400,
    json: { error: { message: `${message} (request_id: ${id})`, type: 'invalid_request_error', param: null, code: 400 } },
  });
  expect(seenByWorkers()).toEqual([]);
}

const messages = [{ role: 'user', content: 'hello' }];

beforeAll(async () => {
  redisServer = await RedisServer.start();
  stack = await startStack({
    configDoc: (urls) => {
      const steps = [
        {
          type: 'async-broker',
          params: { redis_url: redisServer.url(), routes: [{ model: MODEL, queue: QUEUE, tier: 'batch' }], wait_cap_seconds: 5 },
        },
        { type: 'replace-media-urls' },
        ...defaultSteps(urls),
      ];
      const doc = stackConfigDoc({ steps: () => steps }, urls);
      (doc['pipeline'] as Record<string, unknown>)['request_limits'] = { max_tokens: MAX_TOKENS };
      return doc;
    },
  });
}, 120_000);

afterAll(async () => {
  await stack?.close();
  await redisServer?.destroy();
});

beforeEach(() => stack.reset());

describe('bad shape: a 400 naming the field and the rule, before any side call', () => {
  it.each([
    ['/v1/chat/completions', { model: MODEL, messages: 'hello' }, 'messages must be a non-empty array'],
    ['/v1/chat/completions', { model: MODEL, messages: [...messages, { content: 'x' }] }, 'messages[1].role must be a string'],
    [
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'foo' }] }] },
      'messages[0].content[1].type "foo" is not a known content part type',
    ],
    ['/v1/completions', { model: MODEL, prompt: { text: 'x' } }, 'prompt must be a string, an array of strings, or an array of token ids'],
    ['/v1/responses', { model: MODEL, input: 42 }, 'input must be a string or an array'],
  ])('%s %j', async (path, body, message) => {
    const id = nextId('shape');
    expectRefused(await post(path, body, { 'x-request-id': id }), message, id);
  });
});

describe('request limits', () => {
  it.each([
    ['/v1/completions', 'n must be an integer from 1 to 128, got 9007199254740992', { prompt: 'x', n: 2 ** 53 }],
    ['/v1/chat/completions', 'n must be an integer from 1 to 128, got 129', { messages, n: 129 }],
    [
      '/v1/chat/completions',
      `max_tokens must be an integer from 0 to ${MAX_TOKENS}, got ${MAX_TOKENS + 1}`,
      { messages, max_tokens: MAX_TOKENS + 1 },
    ],
    ['/v1/chat/completions', 'top_logprobs must be an integer from 0 to 20, got 0.5', { messages, top_logprobs: 0.5 }],
    ['/v1/completions', 'logprobs must be an integer from 0 to 20, got a string', { prompt: 'x', logprobs: '5' }],
    ['/v1/chat/completions', 'stop must hold at most 64 strings, got 1000', { messages, stop: new Array(1000).fill('x') }],
  ])('%s: 400 %s; no worker is called', async (path, message, body) => {
    const id = nextId('limit');
    expectRefused(await post(path, { model: MODEL, ...body }, { 'x-request-id': id }), message, id);
  });

  it('values exactly at each limit are forwarded and answered', async () => {
    const id = nextId('edge');
    const res = await post(
      '/v1/chat/completions',
      {
        model: MODEL,
        messages,
        n: 128,
        max_tokens: MAX_TOKENS,
        logprobs: true,
        top_logprobs: 20,
        stop: new Array(64).fill('x'.repeat(1024)),
      },
      { 'x-request-id': id },
    );
    expect(res.status).toBe(200);
    const [decode] = stack.sims.decode.requests.filter((r) => r.path === '/v1/chat/completions' && r.headers['x-request-id'] === id);
    expect(decode?.json).toMatchObject({ n: 128, max_tokens: MAX_TOKENS, top_logprobs: 20 });
    expect(stack.sims.render.requests.length).toBe(1);
  });

  it('/v1/messages (passed through to decode) gets the same limits', async () => {
    const over = nextId('messages');
    expectRefused(
      await post('/v1/messages', { model: MODEL, max_tokens: 2 ** 53, messages }, { 'x-request-id': over }),
      'max_tokens must be an integer from 0 to 64, got 9007199254740992',
      over,
    );
    const edge = nextId('messages');
    await post('/v1/messages', { model: MODEL, max_tokens: MAX_TOKENS, messages }, { 'x-request-id': edge });
    // Our simulator serves no /v1/messages; what counts here is that the request reached decode.
    expect(seenByWorkers()).toEqual(['decode POST /v1/messages']);
  });
});

describe('the async broker: refused at enqueue, with the same 400', () => {
  it('X-AP-Mode: enqueue with a bad value gets the answer it would get without the header; nothing is written to Redis', async () => {
    const before = await redisKeys();
    const plain = nextId('plain');
    const queued = nextId('queued');
    const body = { model: MODEL, messages, n: 2 ** 53 };
    const message = 'n must be an integer from 1 to 128, got 9007199254740992';
    expectRefused(await post('/v1/chat/completions', body, { 'x-request-id': plain }), message, plain);
    expectRefused(await post('/v1/chat/completions', body, { 'x-request-id': queued, 'x-ap-mode': 'enqueue' }), message, queued);
    const shape = nextId('queued-shape');
    expectRefused(
      await post('/v1/chat/completions', { model: MODEL, messages: [] }, { 'x-request-id': shape, 'x-ap-mode': 'enqueue' }),
      'messages must be a non-empty array',
      shape,
    );
    expect(await redisKeys()).toEqual(before);
  });

  it('the control: a valid request with the header is queued (202) and written to Redis', async () => {
    const id = nextId('control');
    const res = await post('/v1/chat/completions', { model: MODEL, messages, n: 128 }, { 'x-request-id': id, 'x-ap-mode': 'enqueue' });
    expect(res.status).toBe(202);
    expect((await redisKeys()).some((k) => k.includes(id))).toBe(true);
  });
});
