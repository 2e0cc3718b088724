/**
 * Upstream error bodies never reach the client (issue #8): whatever a render,
 * encode, prefill worker or an image host answers on failure (plain text, HTML, an OpenAI-style
 * JSON error of its own, a megabyte of it), the client gets our error body with our message.
 *
 * But for one part (issue 19): when render, encode or prefill refuse the request with a 4xx whose
 * JSON body carries a string `error.message` (or `message`), that string, sanitised and cut at 512
 * characters, follows our message. Nothing else of the body, and nothing of any 5xx body.
 *
 * The one exception is decode: it is the request Envoy forwards, and its answer (error or not)
 * streams back through Envoy untouched, as upstream relays it; the last test pins that down.
 */
import { at, TestClient } from '../../launch/client';
import { startStack, type Role, type Stack } from '../support/stack';
import { ImageServer, PNG_BYTES } from '../unit/steps/media/image-server';
import { expectOpenAiError, UPSTREAM_SECRET } from '../faults/support/expect';

/** Bodies of which nothing may reach the client, whatever the status. */
const BODIES = [
  `${UPSTREAM_SECRET} plain text`,
  `<html><body>${UPSTREAM_SECRET}</body></html>`,
  JSON.stringify({ error: { message: { text: UPSTREAM_SECRET }, type: 'invalid_request_error', code: 400 } }),
  JSON.stringify({ detail: [{ loc: ['body', 'messages'], input: UPSTREAM_SECRET }] }),
  `${UPSTREAM_SECRET} `.repeat(40_000),
];
/** What a worker says about the client's input: the string the client may see, once sanitised. */
const SAID = 'messages: field required';
/** A worker's JSON 4xx: its message (with a control character and a line break) next to fields that stay hidden. */
const JSON_4XX = JSON.stringify({
  error: { message: `\u0007${SAID}\u0000\n`, type: 'BadRequestError', param: UPSTREAM_SECRET, code: 400 },
  trace: UPSTREAM_SECRET,
});
const escapeRe = (s: string) => s.replace(/[[\]]/g, '\\$&');

describe('upstream error bodies', () => {
  let stack: Stack;
  let client: TestClient;
  let images: ImageServer;

  beforeAll(async () => {
    images = await new ImageServer().start();
    stack = await startStack({
      steps: ({ render }) => [
        { type: 'replace-media-urls', params: { allowed_ip_ranges: ['127.0.0.1/32'] } },
        { type: 'render', params: { address: render } },
        { type: 'encode' },
        { type: 'prefill' },
        { type: 'decode' },
      ],
    });
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
    await images?.stop();
  });
  beforeEach(() => {
    stack.reset();
    images.reset();
  });

  const chatWith = (url: string) => ({
    model: 'sim-model',
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'image_url', image_url: { url } },
        ],
      },
    ],
  });
  const inline = `data:image/png;base64,${PNG_BYTES.toString('base64')}`;

  describe.each(['render', 'encode', 'prefill'] as const)('%s', (role: Role) => {
    const step = role === 'encode' ? 'encode[0]' : role;
    it.each([400, 404, 422, 429, 500, 503])("HTTP %d: our status and message, none of the worker's body", async (status) => {
      for (const body of BODIES) {
        stack.reset();
        stack.sims[role].setFaults([{ status, body }]);
        const res = await client.post('/v1/chat/completions', chatWith(inline));
        const expected = status < 500 ? status : 502;
        expectOpenAiError(res, expected);
        expect(res.headers['x-inference-pod']).toBeUndefined();
        if (status < 500) {
          expect(at(res.json, 'error', 'message')).toMatch(
            new RegExp(`^${escapeRe(step)} rejected the request: HTTP ${status} \\(request_id: `),
          );
        }
      }
    });

    it.each([400, 404, 422, 429])(
      "HTTP %d with a JSON error: the worker's message follows ours, sanitised, and nothing else",
      async (status) => {
        stack.sims[role].setFaults([{ status, body: JSON_4XX }]);
        const res = await client.post('/v1/chat/completions', chatWith(inline));
        expectOpenAiError(res, status);
        expect(at(res.json, 'error', 'message')).toMatch(
          new RegExp(`^${escapeRe(step)} rejected the request: HTTP ${status}: ${SAID} \\(request_id: [A-Za-z0-9-]+\\)$`),
        );
      },
    );

    it.each([500, 503])('HTTP %d with a JSON error: none of it, not even the message', async (status) => {
      stack.sims[role].setFaults([{ status, body: JSON_4XX }]);
      const res = await client.post('/v1/chat/completions', chatWith(inline));
      expectOpenAiError(res, 502);
      expect(res.text).not.toContain(SAID);
    });

    it('a long message is cut at 512 characters', async () => {
      stack.sims[role].setFaults([{ status: 400, body: JSON.stringify({ message: `${'x'.repeat(600)}${UPSTREAM_SECRET}` }) }]);
      const res = await client.post('/v1/chat/completions', chatWith(inline));
      expectOpenAiError(res, 400);
      expect(at(res.json, 'error', 'message')).toMatch(
        new RegExp(`^${escapeRe(step)} rejected the request: HTTP 400: x{512} \\(request_id: `),
      );
    });
  });

  it.each([403, 404, 500])('an image host answering %d with a body: 502 and none of its body', async (status) => {
    images.on('/img.png', (_req, res) =>
      res.writeHead(status, { 'content-type': 'text/html', 'x-host-secret': UPSTREAM_SECRET }).end(BODIES[1]),
    );
    const res = await client.post('/v1/chat/completions', chatWith(`${images.url}/img.png`));
    expectOpenAiError(res, 502);
    expect(JSON.stringify(res.headers)).not.toContain(UPSTREAM_SECRET);
  });

  it("decode (Envoy's forward) is the documented exception: its answer reaches the client as sent", async () => {
    stack.sims.decode.setFaults([{ status: 503, body: 'decode worker says: overloaded' }]);
    const res = await client.post('/v1/chat/completions', chatWith(inline));
    expect(res.status).toBe(503);
    expect(res.text).toBe('decode worker says: overloaded');
  });
});
