/**
 * Issue #3 acceptance through the real Envoy, in both ext_proc body modes: multimodal chat (images
 * downloaded from a local host or inlined), the encode fan-out and its EC params reaching prefill,
 * the tokens-in format, the 400/502 rules of replace-media-urls, the SSRF guard, and large bodies.
 *
 * Network safety: every image URL here points at this machine's loopback (the local image host on
 * 127.0.0.1, or other loopback forms). Non-loopback ranges are covered by the unit tests, through
 * an injected resolver and a dialer that never opens a socket.
 */
import type { RecordedRequest } from '../../sim/simulator';
import { ImageServer, PNG_BYTES } from '../unit/steps/media/image-server';
import type { AccessLogEntry } from '../support/access-log';
import { at, TestClient } from '../../launch/client';
import { startStack, type Stack } from '../support/stack';

const MODEL = 'sim-model';
const MiB = 1024 * 1024;
let seq = 0;
const nextId = (): string => `mm-${process.pid}-${Date.now()}-${++seq}`;

const images = new ImageServer();
const pngUri = `data:image/png;base64,${PNG_BYTES.toString('base64')}`;

beforeAll(async () => {
  await images.start();
  images.file('/cat.png', PNG_BYTES, 'image/png');
  images.file('/dog.jpg', Buffer.from('not-really-a-jpeg'), 'image/jpeg');
  images.file('/big.png', Buffer.alloc(MiB + 1, 1), 'image/png');
  images.status('/gone.png', 404);
  images.hang('/slow.png');
  images.redirect('/to-v4-loopback', `http://127.0.0.2:${images.port}/cat.png`);
  images.redirect('/to-v6-loopback', `http://[::1]:${images.port}/cat.png`);
  images.redirect('/to-cat', '/cat.png');
});
afterAll(async () => {
  await images.stop();
});

function chat(...urls: string[]) {
  return {
    model: MODEL,
    max_tokens: 5,
    messages: [
      {
        role: 'user',
        content: [{ type: 'text', text: 'what is in the picture' }, ...urls.map((url) => ({ type: 'image_url', image_url: { url } }))],
      },
    ],
  };
}

const legsFor = (reqs: RecordedRequest[], id: string): RecordedRequest[] => reqs.filter((r) => r.headers['x-request-id'] === id);

/** The most gateway legs of one profile that were in flight at the same moment (from Envoy's own log). */
function peakConcurrency(entries: AccessLogEntry[]): number {
  const events: Array<[number, number]> = [];
  for (const e of entries) {
    const start = Date.parse(e.start_time);
    events.push([start, 1], [start + e.duration, -1]);
  }
  // Ends before starts at the same millisecond: back-to-back legs are not concurrent.
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let peak = 0;
  for (const [, d] of events) peak = Math.max(peak, (now += d));
  return peak;
}

async function encodeLogLines(stack: Stack, id: string, n: number): Promise<AccessLogEntry[]> {
  const match = (e: AccessLogEntry): boolean => e.listener === 'gateway' && e.epp_profile === 'encode' && e.x_request_id === id;
  await stack.accessLog.waitFor(() => stack.accessLog.entries().filter(match).length >= n);
  return stack.accessLog.entries().filter(match);
}

function expectError(res: { status: number; json: unknown }, status: number, text?: string): void {
  expect(res.status).toBe(status);
  expect(res.json).toMatchObject({ error: { code: status } });
  if (text) expect(String(at(res.json, 'error', 'message'))).toContain(text);
}

describe.each(['full_duplex', 'buffered'] as const)('multimodal through Envoy (%s)', (bodyMode) => {
  /** Serves images from this machine: only 127.0.0.1 is exempted from the SSRF guard. */
  let local: Stack;
  /** The production defaults of the guard, the tokens-in format and an allowed_domains list. */
  let strict: Stack;
  let toLocal: TestClient;
  let toStrict: TestClient;

  beforeAll(async () => {
    local = await startStack({
      bodyMode,
      kvConnector: 'kv-nixl',
      steps: ({ render }) => [
        {
          type: 'replace-media-urls',
          params: { allowed_ip_ranges: ['127.0.0.1/32'], max_multimodal_entries: 4, max_download_size: 1, download_timeout: '1s' },
        },
        { type: 'render', params: { address: render } },
        { type: 'encode', params: { max_parallel: 3, ec_connector: 'ec-nixl' } },
        { type: 'prefill', params: { ec_connector: 'ec-nixl' } },
        { type: 'decode' },
      ],
    });
    strict = await startStack({
      bodyMode,
      useOpenaiFormat: false,
      steps: ({ render }) => [
        { type: 'replace-media-urls', params: { allowed_domains: ['localhost', '127.0.0.1', '::1', '::ffff:7f00:1'] } },
        { type: 'render', params: { address: render } },
        { type: 'encode', params: { ec_connector: 'ec-nixl' } },
        { type: 'prefill', params: { ec_connector: 'ec-nixl' } },
        { type: 'decode' },
      ],
    });
    toLocal = new TestClient(local.publicUrl);
    toStrict = new TestClient(strict.publicUrl);
  });
  afterAll(async () => {
    await toLocal?.close();
    await toStrict?.close();
    await local?.close();
    await strict?.close();
  });
  beforeEach(() => {
    local.reset();
    strict.reset();
    images.hits.length = 0;
    images.connections.length = 0;
  });

  it('chat with a downloaded image and a data: URI: each reaches encode, merged ec_transfer_params reach prefill', async () => {
    const id = nextId();
    const dataUri = 'data:image/jpeg;base64,/9j/4AAQSkZJRg==';
    const res = await toLocal.post('/v1/chat/completions', chat(`${images.url}/cat.png`, dataUri), { headers: { 'x-request-id': id } });
    expect(res.status).toBe(200);
    expect(images.hits).toEqual(['/cat.png']);

    const render = legsFor(local.sims.render.requests, id);
    const encodes = legsFor(local.sims.encode.requests, id);
    const prefill = legsFor(local.sims.prefill.requests, id);
    const decode = legsFor(local.sims.decode.requests, id);
    expect([encodes.length, prefill.length, decode.length]).toEqual([2, 1, 1]);
    // Render saw the downloaded image inlined.
    expect(at(local.sims.render.requests[0]?.json, 'messages', 0, 'content', 1, 'image_url', 'url')).toBe(pngUri);
    void render;

    const encodedUrls = encodes.map((r) => at(r.json, 'messages', 0, 'content', 0, 'image_url', 'url')).sort();
    expect(encodedUrls).toEqual([dataUri, pngUri].sort());
    for (const r of encodes) {
      expect(r.path).toBe('/v1/chat/completions');
      expect(r.headers['epp-profile']).toBe('encode');
      expect(r.json).toMatchObject({ max_tokens: 1, stream: false });
    }
    const hashes = encodes.map((r) => at(r.json, 'tokens', 'features', 'mm_hashes', 'image', 0) as string);
    const ec = at(prefill[0]!.json, 'ec_transfer_params') as Record<string, unknown>;
    expect(Object.keys(ec).sort()).toEqual([...hashes].sort());
    expect(ec[hashes[0]!]).toMatchObject({ peer_host: 'DUMMY', peer_port: 1234 });
    // Decode: the client's request, with the image hashes and no EC params.
    expect(at(decode[0]!.json, 'messages', 0, 'content', 1, 'uuid')).toEqual(expect.any(String));
    expect(decode[0]!.json).not.toHaveProperty('ec_transfer_params');
    expect(at(decode[0]!.json, 'kv_transfer_params', 'do_remote_prefill')).toBe(true);

    const line = await local.accessLog.waitFor((e) => e.listener === 'public' && e.x_request_id === id);
    expect(line).toMatchObject({ response_code: 200, mm_entries: 2 });
  });

  it('three images -> three encode calls running at the same time; four are capped at max_parallel (3)', async () => {
    // Each encode answer is held, so calls that overlap are visible in Envoy's access log.
    local.sims.encode.setFaults([{ delayMs: 300 }]);
    const three = nextId();
    const r3 = await toLocal.post('/v1/chat/completions', chat(`${images.url}/cat.png`, `${images.url}/dog.jpg`, pngUri), {
      headers: { 'x-request-id': three },
    });
    expect(r3.status).toBe(200);
    expect(legsFor(local.sims.encode.requests, three)).toHaveLength(3);
    expect(peakConcurrency(await encodeLogLines(local, three, 3))).toBe(3);

    const four = nextId();
    const r4 = await toLocal.post('/v1/chat/completions', chat(pngUri, pngUri, `${images.url}/cat.png`, `${images.url}/dog.jpg`), {
      headers: { 'x-request-id': four },
    });
    expect(r4.status).toBe(200);
    expect(legsFor(local.sims.encode.requests, four)).toHaveLength(4);
    expect(peakConcurrency(await encodeLogLines(local, four, 4))).toBe(3);
  });

  it.each([
    ['size', () => chat(`${images.url}/big.png`), 'exceeds max 1048576'],
    ['count', () => chat(pngUri, pngUri, pngUri, pngUri, pngUri), 'too many multimodal entries: got 5, max 4'],
    ['content-type', () => chat('data:text/html;base64,PGgxPmhpPC9oMT4='), 'data URI content type "text/html" not allowed'],
    ['scheme', () => chat('file:///etc/passwd'), 'scheme "file" not allowed'],
  ])('a %s violation is a 400 and no worker is called', async (_what, body, text) => {
    const res = await toLocal.post('/v1/chat/completions', body());
    expectError(res, 400, text);
    expect(local.sims.render.requests).toHaveLength(0);
    expect(local.sims.encode.requests).toHaveLength(0);
    expect(local.sims.decode.requests).toHaveLength(0);
  });

  it('an image host answering 404, or never finishing, is a 502', async () => {
    expectError(await toLocal.post('/v1/chat/completions', chat(`${images.url}/gone.png`)), 502, 'internal error');
    expectError(await toLocal.post('/v1/chat/completions', chat(`${images.url}/slow.png`)), 502, 'internal error');
    expect(local.sims.render.requests).toHaveLength(0);
  });

  it('redirects are followed, and a redirect to another loopback address is a 400', async () => {
    expect((await toLocal.post('/v1/chat/completions', chat(`${images.url}/to-cat`))).status).toBe(200);
    for (const hop of ['/to-v4-loopback', '/to-v6-loopback']) {
      images.hits.length = 0;
      expectError(await toLocal.post('/v1/chat/completions', chat(`${images.url}${hop}`)), 400, 'destination address not allowed');
      expect(images.hits).toEqual([hop]);
    }
  });

  it('SSRF, production defaults: loopback in every form, and a name resolving to loopback, are 400 with no connection', async () => {
    const p = images.port;
    for (const url of [
      `http://127.0.0.1:${p}/cat.png`,
      `http://[::1]:${p}/cat.png`,
      `http://localhost:${p}/cat.png`,
      `http://2130706433:${p}/cat.png`,
      `http://0x7f.1:${p}/cat.png`,
      `http://[::ffff:127.0.0.1]:${p}/cat.png`,
    ]) {
      expectError(await toStrict.post('/v1/chat/completions', chat(url)), 400, 'destination address not allowed');
    }
    expect(images.hits).toEqual([]);
    expect(images.connections).toEqual([]);
    expect(strict.sims.render.requests).toHaveLength(0);
  });

  it('allowed_domains: a host not on the list is a 400 before any lookup', async () => {
    expectError(
      await toStrict.post('/v1/chat/completions', chat(`http://127.0.0.2:${images.port}/cat.png`)),
      400,
      'host "127.0.0.2" not allowed',
    );
  });

  it('tokens-in chat: encode and prefill post generate bodies with kwargs_data and the transfer params in extra_args', async () => {
    const id = nextId();
    const res = await toStrict.post('/v1/chat/completions', chat(pngUri), { headers: { 'x-request-id': id } });
    expect(res.status).toBe(200);
    const [enc] = legsFor(strict.sims.encode.requests, id);
    const [pre] = legsFor(strict.sims.prefill.requests, id);
    const [dec] = legsFor(strict.sims.decode.requests, id);
    expect(enc!.path).toBe('/inference/v1/generate');
    const hash = at(enc!.json, 'features', 'mm_hashes', 'image', 0) as string;
    expect(at(enc!.json, 'features', 'kwargs_data', 'image', 0)).toEqual(expect.any(String));
    expect(at(enc!.json, 'sampling_params')).toEqual({ max_tokens: 1 });
    expect(pre!.path).toBe('/inference/v1/generate');
    expect(at(pre!.json, 'features', 'kwargs_data', 'image')).toEqual([expect.any(String)]);
    expect(at(pre!.json, 'sampling_params', 'extra_args', 'kv_transfer_params')).toEqual({
      do_remote_decode: true,
      do_remote_prefill: false,
    });
    expect(Object.keys(at(pre!.json, 'sampling_params', 'extra_args', 'ec_transfer_params') as object)).toEqual([hash]);
    // Decode keeps the chat path, shaped as generate (Q1).
    expect(dec!.path).toBe('/v1/chat/completions');
    expect(at(dec!.json, 'sampling_params', 'extra_args', 'kv_transfer_params', 'do_remote_prefill')).toBe(true);
  });

  it('tokens-in generate: kwargs_data with null entries (encoder-cache hits) reaches prefill as null; encode is skipped', async () => {
    const id = nextId();
    const features = {
      mm_hashes: { image: ['h-inline', 'h-cached'] },
      mm_placeholders: {
        image: [
          { offset: 1, length: 2 },
          { offset: 4, length: 2 },
        ],
      },
      kwargs_data: { image: ['a3dhcmdz', null] },
    };
    const res = await toStrict.post(
      '/inference/v1/generate',
      { model: MODEL, token_ids: [1, 9, 9, 5, 8, 8, 2], features, sampling_params: { max_tokens: 2 } },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    expect(legsFor(strict.sims.encode.requests, id)).toHaveLength(0);
    const [pre] = legsFor(strict.sims.prefill.requests, id);
    expect(at(pre!.json, 'features')).toEqual(features);
    expect(pre!.body.toString('utf8')).toContain('"kwargs_data":{"image":["a3dhcmdz",null]}');
  });

  it('large bodies: a 40 MB generate request succeeds; a 65 MiB one gets 413', async () => {
    const id = nextId();
    const tensor = 'A'.repeat(40_000_000);
    const features = {
      mm_hashes: { image: ['big'] },
      mm_placeholders: { image: [{ offset: 1, length: 2 }] },
      kwargs_data: { image: [tensor] },
    };
    const ok = await toLocal.post(
      '/inference/v1/generate',
      { model: MODEL, token_ids: [1, 7, 7, 2], features, sampling_params: { max_tokens: 2 } },
      { headers: { 'x-request-id': id }, timeoutMs: 60_000 },
    );
    expect(ok.status).toBe(200);
    const [pre] = legsFor(local.sims.prefill.requests, id);
    expect(pre!.body.length).toBeGreaterThan(40_000_000);
    const [dec] = legsFor(local.sims.decode.requests, id);
    expect(dec!.body.length).toBeGreaterThan(40_000_000);

    const huge = Buffer.alloc(65 * MiB, 0x20);
    Buffer.from('{"model":"m","token_ids":[1],"x":"').copy(huge);
    huge[huge.length - 2] = 0x22; // "
    huge[huge.length - 1] = 0x7d; // }
    const tooBig = await toLocal.post('/inference/v1/generate', huge, { timeoutMs: 60_000 });
    expect(tooBig.status).toBe(413);
    expect(local.sims.prefill.requests.filter((r) => r.headers['x-request-id'] !== id)).toHaveLength(0);
  }, 120_000);
});
