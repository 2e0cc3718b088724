/**
 * replace-media-urls against a real image host on 127.0.0.1 (reference §3.1, §9.8). The host is
 * reachable only through the test-only `allowed_ip_ranges: ["127.0.0.1/32"]` exemption, and every
 * connection goes through a dialer that refuses anything but loopback.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConfigError } from '../../../../src/config/errors';
import { BadRequestError, CancelledError } from '../../../../src/pipeline/errors';
import { MediaDownloadError } from '../../../../src/steps/media/downloader';
import { createReplaceMediaUrlsStep, MAX_DOWNLOAD_SIZE_MB } from '../../../../src/steps/replace-media-urls';
import { ImageServer, PNG_BYTES, RecordingLoopbackDialer } from './image-server';
import { chatWith, imageUrls, mediaDeps, mediaStep, run } from './helpers';

const MiB = 1024 * 1024;
const LOOPBACK = { allowed_ip_ranges: ['127.0.0.1/32'] };
const server = new ImageServer();
let dialer: RecordingLoopbackDialer;

beforeAll(async () => {
  await server.start();
});
afterAll(async () => {
  await server.stop();
});
beforeEach(() => {
  server.reset();
  dialer = new RecordingLoopbackDialer();
});

function step(params: Record<string, unknown> = {}) {
  return mediaStep({ ...LOOPBACK, ...params }, { dial: dialer.dial });
}

const png = `data:image/png;base64,${PNG_BYTES.toString('base64')}`;

describe('replace-media-urls: inlining', () => {
  it('downloads an http image, rewrites the URL to a data URI and seeds one entry', async () => {
    server.file('/cat.png', PNG_BYTES, 'image/png');
    const body = chatWith(`${server.url}/cat.png`);
    const r = await run(step(), body);
    expect(r.status).toBe(200);
    expect(imageUrls(body)).toEqual([png]);
    expect(r.ctx.multimodalEntries).toEqual([{ index: 0, base64Data: PNG_BYTES.toString('base64'), contentType: 'image/png' }]);
    // Other keys of the image_url object are kept.
    expect(((body['messages'] as any)[1].content[1].image_url as any).detail).toBe('low');
    // The checked address is the dialled one: the image host's own loopback literal.
    expect(dialer.calls.map((c) => c.ip)).toEqual(['127.0.0.1']);
  });

  it('is a no-op without images (no download, no entries)', async () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'hello' }] };
    const r = await run(step(), body);
    expect(r.status).toBe(200);
    expect(r.ctx.multimodalEntries).toEqual([]);
    expect(dialer.calls).toEqual([]);
  });

  it('takes a data URI as is: entry from it, URL unchanged, no download', async () => {
    const body = chatWith('data:IMAGE/PNG;base64,QUJD');
    const r = await run(step(), body);
    expect(r.status).toBe(200);
    expect(imageUrls(body)).toEqual(['data:IMAGE/PNG;base64,QUJD']);
    expect(r.ctx.multimodalEntries).toEqual([{ index: 0, base64Data: 'QUJD', contentType: 'image/png' }]);
    expect(dialer.calls).toEqual([]);
  });

  it.each([
    ['http first', ['http', 'data']],
    ['data first', ['data', 'http']],
  ])('mixes http and data URIs positionally (%s)', async (_name, order) => {
    server.file('/a.jpg', Buffer.from('jpeg-bytes'), 'image/jpeg');
    const urls = order.map((k) => (k === 'http' ? `${server.url}/a.jpg` : 'data:image/gif;base64,R0lG'));
    const r = await run(step(), chatWith(...urls));
    expect(r.status).toBe(200);
    const expected = order.map((k) =>
      k === 'http'
        ? { contentType: 'image/jpeg', base64Data: Buffer.from('jpeg-bytes').toString('base64') }
        : { contentType: 'image/gif', base64Data: 'R0lG' },
    );
    expect(r.ctx.multimodalEntries).toEqual(expected.map((e, index) => ({ index, ...e })));
  });

  it('handles several images across messages, in body order, even when they finish out of order', async () => {
    // The first image is held until the other two have been requested.
    let releaseFirst: () => void = () => undefined;
    server.on('/slow.png', (_req, res) => {
      releaseFirst = () => res.writeHead(200, { 'content-type': 'image/png' }).end('slow');
    });
    server.on('/fast.png', (_req, res) => {
      res.writeHead(200, { 'content-type': 'image/webp' }).end('fast');
      if (server.hits.filter((h) => h.startsWith('/fast.png')).length === 2) setTimeout(() => releaseFirst(), 20);
    });
    const body = {
      model: 'm',
      messages: [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: `${server.url}/slow.png` } }] },
        { role: 'assistant', content: 'ok' },
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: `${server.url}/fast.png` } },
            { type: 'input_audio', input_audio: { data: 'x' } },
            { type: 'image_url', image_url: { url: `${server.url}/fast.png?2` } },
          ],
        },
      ],
    };
    const r = await run(step(), body);
    expect(r.status).toBe(200);
    expect(r.ctx.multimodalEntries.map((e) => [e.index, Buffer.from(e.base64Data!, 'base64').toString()])).toEqual([
      [0, 'slow'],
      [1, 'fast'],
      [2, 'fast'],
    ]);
    expect(imageUrls(body)[0]).toBe(`data:image/png;base64,${Buffer.from('slow').toString('base64')}`);
  });

  it('uses application/octet-stream when the host sends no Content-Type, and keeps a sent one verbatim', async () => {
    server.file('/none', PNG_BYTES, null);
    server.file('/params', PNG_BYTES, 'image/png; charset=binary');
    const body = chatWith(`${server.url}/none`, `${server.url}/params`);
    const r = await run(step(), body);
    expect(r.ctx.multimodalEntries.map((e) => e.contentType)).toEqual(['application/octet-stream', 'image/png; charset=binary']);
    expect(imageUrls(body)[0]).toMatch(/^data:application\/octet-stream;base64,/);
  });

  it('undoes gzip it asked for and inlines the image bytes', async () => {
    const big = Buffer.alloc(200_000, 7);
    server.gzip('/z.png', big);
    const r = await run(step(), chatWith(`${server.url}/z.png`));
    expect(r.status).toBe(200);
    expect(Buffer.from(r.ctx.multimodalEntries[0]!.base64Data!, 'base64').equals(big)).toBe(true);
  });

  it('skips malformed parts silently', async () => {
    for (const body of [
      { model: 'm' },
      { model: 'm', messages: ['not a map'] },
      { model: 'm', messages: [{ role: 'user', content: ['not a map'] }] },
      { model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: 'http://x/' }] }] },
      { model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 42 } }] }] },
    ]) {
      const r = await run(step(), body);
      expect(r.status).toBe(200);
      expect(r.ctx.multimodalEntries).toEqual([]);
    }
    expect(dialer.calls).toEqual([]);
  });

  it('is named replace-media-urls and is registered under that name', () => {
    expect(step().type).toBe('replace-media-urls');
    expect(createReplaceMediaUrlsStep({}, mediaDeps).type).toBe('replace-media-urls');
  });
});

describe('replace-media-urls: client errors (400)', () => {
  it('refuses more entries than max_multimodal_entries before any download', async () => {
    server.file('/a.png', PNG_BYTES);
    const body = chatWith(`${server.url}/a.png`, `${server.url}/a.png`, `${server.url}/a.png`);
    const r = await run(step({ max_multimodal_entries: 2 }), body);
    expect(r.status).toBe(400);
    expect(r.message).toContain('too many multimodal entries: got 3, max 2');
    expect(server.hits).toEqual([]);
    expect(r.ctx.multimodalEntries).toEqual([]);
  });

  it('allows exactly max_multimodal_entries', async () => {
    const r = await run(step({ max_multimodal_entries: 2 }), chatWith('data:image/png;base64,AA', 'data:image/png;base64,BB'));
    expect(r.status).toBe(200);
    expect(r.ctx.multimodalEntries).toHaveLength(2);
  });

  it.each([
    ['data:image/png;base64', 'parsing data URI at message 1 part 1: missing comma'],
    ['data:image/png,AAAA', 'parsing data URI at message 1 part 1: data URI must be base64-encoded'],
    ['data:;base64,AAAA', 'parsing data URI at message 1 part 1: data URI missing media type'],
    ['data:text/html;base64,PHNjcmlwdD4=', 'data URI content type "text/html" not allowed at message 1 part 1'],
    ['data:image/svg+xml;base64,PHN2Zz4=', 'data URI content type "image/svg+xml" not allowed'],
  ])('refuses the data URI %s', async (url, message) => {
    const body = chatWith(url);
    const r = await run(step(), body);
    expect(r.status).toBe(400);
    expect(r.message).toContain(message);
    expect(r.ctx.multimodalEntries).toEqual([]);
  });

  it.each(['file:///etc/passwd', 'gopher://127.0.0.1:70/x', 'ftp://127.0.0.1/a.png', 'DATA:image/png;base64,AA', 'javascript:alert(1)'])(
    'refuses the scheme of %s',
    async (url) => {
      const r = await run(step(), chatWith(url));
      expect(r.status).toBe(400);
      expect(r.message).toMatch(/scheme ".*" not allowed/);
      expect(dialer.calls).toEqual([]);
    },
  );

  it.each(['http://', 'http://exa mple.com/a.png', 'not a url', 'http://[::1/'])('refuses the invalid URL %j', async (url) => {
    const r = await run(step(), chatWith(url));
    expect(r.status).toBe(400);
    expect(r.message).toContain('invalid URL');
  });

  it('refuses a Content-Length over the cap without reading the body', async () => {
    server.file('/big', Buffer.alloc(MiB + 1));
    const r = await run(step({ max_download_size: 1 }), chatWith(`${server.url}/big`));
    expect(r.status).toBe(400);
    expect(r.message).toContain(`Content-Length ${MiB + 1} exceeds max ${MiB}`);
    expect(r.ctx.multimodalEntries).toEqual([]);
  });

  it('refuses a chunked body that grows past the cap', async () => {
    server.chunked('/big', Buffer.alloc(MiB + 1));
    const r = await run(step({ max_download_size: 1 }), chatWith(`${server.url}/big`));
    expect(r.status).toBe(400);
    expect(r.message).toContain(`body exceeds max ${MiB}`);
  });

  it('accepts a body of exactly the cap, with or without Content-Length', async () => {
    server.file('/exact', Buffer.alloc(MiB, 1));
    server.chunked('/exact-chunked', Buffer.alloc(MiB, 2));
    const r = await run(step({ max_download_size: 1 }), chatWith(`${server.url}/exact`, `${server.url}/exact-chunked`));
    expect(r.status).toBe(200);
    expect(r.ctx.multimodalEntries.map((e) => Buffer.from(e.base64Data!, 'base64').length)).toEqual([MiB, MiB]);
  });

  it('caps the decompressed size of a gzip body (a small bomb is still refused)', async () => {
    server.gzip('/bomb', Buffer.alloc(MiB + 1));
    const r = await run(step({ max_download_size: 1 }), chatWith(`${server.url}/bomb`));
    expect(r.status).toBe(400);
    expect(r.message).toContain('body exceeds max');
  });

  it('refuses when one image among many is over the cap, and rewrites none', async () => {
    server.file('/ok', PNG_BYTES);
    server.chunked('/big', Buffer.alloc(MiB + 10));
    const body = chatWith(`${server.url}/ok`, `${server.url}/big`, `${server.url}/ok?2`);
    const r = await run(step({ max_download_size: 1 }), body);
    expect(r.status).toBe(400);
    expect(imageUrls(body).every((u) => u.startsWith('http://'))).toBe(true);
    expect(r.ctx.multimodalEntries).toEqual([]);
  });

  it('enforces allowed_domains (case-insensitive) on the URL host', async () => {
    server.file('/a.png', PNG_BYTES);
    const ok = await run(step({ allowed_domains: ['127.0.0.1'] }), chatWith(`${server.url}/a.png`));
    expect(ok.status).toBe(200);
    const refused = await run(step({ allowed_domains: ['images.example.com'] }), chatWith(`${server.url}/a.png`));
    expect(refused.status).toBe(400);
    expect(refused.message).toContain('host "127.0.0.1" not allowed');
    expect(server.hits).toEqual(['/a.png']);
  });

  it('enforces allowed_domains on every redirect target', async () => {
    server.redirect('/hop', `http://localhost:${server.port}/a.png`);
    server.file('/a.png', PNG_BYTES);
    const r = await run(step({ allowed_domains: ['127.0.0.1'] }), chatWith(`${server.url}/hop`));
    expect(r.status).toBe(400);
    expect(r.message).toContain('redirect host "localhost" not allowed');
    expect(server.hits).toEqual(['/hop']);
  });

  it('refuses a redirect to a scheme other than http(s)', async () => {
    server.redirect('/hop', 'file:///etc/passwd');
    const r = await run(step(), chatWith(`${server.url}/hop`));
    expect(r.status).toBe(400);
    expect(r.message).toContain('redirect scheme "file" not allowed');
  });
});

describe('replace-media-urls: download failures (502)', () => {
  it.each([404, 500, 201, 204, 304])('an image host answering %i is a 502, not the client’s fault (Q7)', async (status) => {
    server.status('/x', status);
    const body = chatWith(`${server.url}/x`);
    const r = await run(step(), body);
    expect(r.status).toBe(502);
    expect(r.error).toBeInstanceOf(MediaDownloadError);
    expect(r.errorClass).toBe('media_unavailable');
    expect(r.error!.message).toBe(`downloading ${server.url}/x: HTTP ${status}`);
    // The client sees neither the host's answer nor the URL.
    expect(r.message).toBe('internal error (request_id: rid)');
    expect(imageUrls(body)).toEqual([`${server.url}/x`]);
  });

  it('a closed port is a 502 naming the download', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const r = await run(step(), chatWith(`http://127.0.0.1:${port}/a.png`));
    expect(r.status).toBe(502);
    expect(r.errorClass).toBe('media_unavailable');
    expect(r.error!.message).toMatch(/^downloading http:\/\/127\.0\.0\.1:\d+\/a\.png: request failed: ECONNREFUSED/);
  });

  it('a truncated body is a 502', async () => {
    server.truncated('/cut');
    const r = await run(step(), chatWith(`${server.url}/cut`));
    expect(r.status).toBe(502);
    expect(r.error).toBeInstanceOf(MediaDownloadError);
  });

  it('download_timeout bounds the whole download (a host that never finishes is a 502)', async () => {
    server.hang('/slow');
    const r = await run(step({ download_timeout: '200ms' }), chatWith(`${server.url}/slow`));
    expect(r.status).toBe(502);
    expect(r.error!.message).toContain('timed out after 200 ms');
  });

  it('follows redirects (relative and absolute, 301/302/303/307/308) to the image', async () => {
    server.redirect('/r1', '/r2', 301);
    server.redirect('/r2', `${server.url}/r3`, 302);
    server.redirect('/r3', 'r4', 303);
    server.redirect('/r4', '/r5', 307);
    server.redirect('/r5', '/a.png', 308);
    server.file('/a.png', PNG_BYTES, 'image/png');
    const body = chatWith(`${server.url}/r1`);
    const r = await run(step(), body);
    expect(r.status).toBe(200);
    expect(server.hits).toEqual(['/r1', '/r2', '/r3', '/r4', '/r5', '/a.png']);
    expect(imageUrls(body)).toEqual([png]);
    // One checked dial per hop.
    expect(dialer.calls.map((c) => c.ip)).toEqual(Array(6).fill('127.0.0.1'));
  });

  it('stops at the 10th redirect in a row (502), as Go’s client does; 9 are followed', async () => {
    for (let i = 0; i < 12; i++) server.redirect(`/loop${i}`, `/loop${i + 1}`);
    server.redirect('/nine0', '/nine1');
    for (let i = 1; i < 9; i++) server.redirect(`/nine${i}`, `/nine${i + 1}`);
    server.file('/nine9', PNG_BYTES);
    const loop = await run(step(), chatWith(`${server.url}/loop0`));
    expect(loop.status).toBe(502);
    expect(loop.error!.message).toContain('stopped after 10 redirects');
    expect(server.hits.filter((h) => h.startsWith('/loop'))).toHaveLength(10);
    const nine = await run(step(), chatWith(`${server.url}/nine0`));
    expect(nine.status).toBe(200);
  });

  it('the first failure cancels the downloads still running', async () => {
    let hungClosed = false;
    server.on('/hang', (req) => {
      req.socket.on('close', () => (hungClosed = true));
    });
    server.status('/missing', 404);
    const r = await run(step({ download_timeout: '20s' }), chatWith(`${server.url}/hang`, `${server.url}/missing`));
    expect(r.status).toBe(502);
    expect(r.error!.message).toContain('HTTP 404');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(hungClosed).toBe(true);
  }, 10_000);

  it('runs at most max_concurrent_downloads at a time', async () => {
    server.barrier('/img', PNG_BYTES, 2);
    const urls = [1, 2, 3, 4].map((i) => `${server.url}/img?${i}`);
    const r = await run(step({ max_concurrent_downloads: 2 }), chatWith(...urls));
    expect(r.status).toBe(200);
    expect(server.maxInFlight).toBe(2);
    expect(r.ctx.multimodalEntries).toHaveLength(4);
  });

  it('downloads in parallel up to the limit', async () => {
    server.barrier('/img', PNG_BYTES, 4);
    const urls = [1, 2, 3, 4].map((i) => `${server.url}/img?${i}`);
    const r = await run(step({ max_concurrent_downloads: 10 }), chatWith(...urls));
    expect(r.status).toBe(200);
    expect(server.maxInFlight).toBe(4);
  });
});

describe('replace-media-urls: cancellation', () => {
  it('a cancelled request ends with a cancellation, before even an invalid data URI is parsed', async () => {
    const ac = new AbortController();
    ac.abort();
    const r = await run(step(), chatWith('data:broken'), ac.signal);
    expect(r.error).toBeInstanceOf(CancelledError);
  });

  it('the client going away cancels running downloads', async () => {
    let closed = false;
    server.on('/hang', (req) => {
      req.socket.on('close', () => (closed = true));
    });
    const ac = new AbortController();
    const pending = run(step({ download_timeout: '20s' }), chatWith(`${server.url}/hang`), ac.signal);
    while (server.hits.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    ac.abort();
    const r = await pending;
    expect(r.error).toBeInstanceOf(CancelledError);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(closed).toBe(true);
  }, 10_000);
});

describe('replace-media-urls: env proxies are not used (deviation: the dialled address must be the checked one)', () => {
  it('connects to the image host directly even with HTTP_PROXY set', async () => {
    const proxyHits: string[] = [];
    const proxy = createServer((req, res) => {
      proxyHits.push(req.url ?? '');
      res.writeHead(502).end();
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const saved = { HTTP_PROXY: process.env['HTTP_PROXY'], http_proxy: process.env['http_proxy'] };
    process.env['HTTP_PROXY'] = process.env['http_proxy'] = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    try {
      server.file('/a.png', PNG_BYTES);
      const r = await run(step(), chatWith(`${server.url}/a.png`));
      expect(r.status).toBe(200);
      expect(proxyHits).toEqual([]);
      expect(server.hits).toEqual(['/a.png']);
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });
});

describe('replace-media-urls: params', () => {
  const build = (params: Record<string, unknown>) => () => createReplaceMediaUrlsStep(params, mediaDeps);

  it('has the upstream defaults', () => {
    expect(build({})).not.toThrow();
  });

  it.each([
    [{ max_multimodal_entries: -1 }, 'max_multimodal_entries'],
    [{ max_concurrent_downloads: 0 }, 'max_concurrent_downloads'],
    [{ max_concurrent_downloads: -1 }, 'max_concurrent_downloads'],
    [{ max_download_size: 0 }, 'max_download_size'],
    [{ max_download_size: -1 }, 'max_download_size'],
    [{ max_download_size: MAX_DOWNLOAD_SIZE_MB + 1 }, 'max_download_size'],
    [{ max_download_size: Number.MAX_SAFE_INTEGER }, 'max_download_size'],
    [{ max_download_size: 1.5 }, 'max_download_size'],
    [{ max_download_size: '10' }, 'max_download_size'],
    [{ download_timeout: 'abc' }, 'download_timeout'],
    [{ download_timeout: '30' }, 'download_timeout'],
    [{ download_timeout: 30 }, 'download_timeout'],
    [{ download_timeout: '0s' }, 'download_timeout'],
    [{ allow_private_networks: 'true' }, 'allow_private_networks'],
    [{ allowed_domains: 'example.com' }, 'allowed_domains'],
    [{ allowed_domains: { a: 1 } }, 'allowed_domains'],
    [{ allowed_domains: ['ok.example', 42] }, 'allowed_domains'],
    [{ allowed_ip_ranges: ['not-a-range'] }, 'allowed_ip_ranges'],
    [{ allowed_ip_ranges: ['0.0.0.0/0'] }, 'allowed_ip_ranges'],
    [{ allowed_ip_ranges: '127.0.0.1/32' }, 'allowed_ip_ranges'],
  ])('%j is refused at start-up, naming %s', (params, key) => {
    expect(build(params)).toThrow(ConfigError);
    expect(build(params)).toThrow(`replace-media-urls.params.${key}`);
  });

  it.each([
    { max_concurrent_downloads: 5 },
    { max_download_size: 5.0 },
    { max_download_size: MAX_DOWNLOAD_SIZE_MB },
    { max_multimodal_entries: 0 },
    { download_timeout: '1m30s' },
    { allowed_domains: ['a.example', 'B.example'] },
    { allowed_domains: [] },
    { allowed_ip_ranges: ['127.0.0.1/32', '::1'] },
    { allow_private_networks: true },
  ])('%j is accepted', (params) => {
    expect(build(params)).not.toThrow();
  });

  it('errors in messages never carry what a client cannot already see', async () => {
    const r = await run(step({ allowed_domains: ['x.example'] }), chatWith('http://user:secret@127.0.0.1/a.png'));
    expect(r.status).toBe(400);
    expect(r.message).not.toContain('secret');
    expect(r.error).toBeInstanceOf(BadRequestError);
  });
});
