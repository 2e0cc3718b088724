/**
 * Downloads one image for replace-media-urls, with its own HTTP client (never the
 * gateway's): a fresh connection per hop, dialled by IP after the SSRF guard has passed that IP.
 *
 * 400 (BadRequestError): a URL that is invalid, not http(s), or whose host (or a redirect target's)
 * is not in `allowed_domains`; a destination address the guard refuses; a body over the size cap.
 * 502 (MediaDownloadError): any status but 200, network errors, timeouts, truncated bodies, too
 * many redirects.
 */
import type { Socket } from 'node:net';
import { isIP } from 'node:net';
import { pipeline } from 'node:stream';
import type { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { UndiciClient, undiciRequest } from '../../gateway/undici-core';
import type { Logger } from 'pino';
import { discard, readCapped } from '../../gateway/read-capped';
import { deadline } from '../../pipeline/deadline';
import { BadRequestError, CancelledError, MediaUnavailableError, UPSTREAM_ERROR_BODY_CAP } from '../../pipeline/errors';
import type { AddressGuard } from './address-guard';
import type { DomainAllowlist } from './domain-allowlist';
import type { Dialer, Resolver } from './network';
import { systemResolve, tcpDial } from './network';

/** A download that failed for a reason that is not the client's fault (502, `media_unavailable`). */
export class MediaDownloadError extends MediaUnavailableError {
  override readonly name = 'MediaDownloadError';
}

/** As Go's http.Client: the 10th redirect in a row is refused. */
export const MAX_REDIRECTS = 10;
const REDIRECT_STATUSES: ReadonlySet<number> = new Set([301, 302, 303, 307, 308]);
const DEFAULT_CONTENT_TYPE = 'application/octet-stream';
const USER_AGENT = 'epd-coordinator';

export interface DownloaderOptions {
  readonly guard: AddressGuard;
  readonly domains: DomainAllowlist;
  /** A body of exactly this many bytes is accepted; one more is a 400. */
  readonly maxBytes: number;
  /** The whole download: every hop, and the body. */
  readonly timeoutMs: number;
  readonly resolve?: Resolver;
  readonly dial?: Dialer;
}

export interface DownloadedImage {
  readonly data: Buffer;
  /** The response `Content-Type` verbatim (not validated, as upstream), or `application/octet-stream`. */
  readonly contentType: string;
}

/** A URL for logs and error messages: bounded, and without credentials. */
export function describeUrl(raw: string): string {
  let text = raw;
  try {
    const u = new URL(raw);
    u.username = '';
    u.password = '';
    text = u.href;
  } catch {
    // keep the raw text
  }
  return text.length > 200 ? `${text.slice(0, 200)}...` : text;
}

function headerValue(v: string | string[] | undefined): string {
  if (Array.isArray(v)) return v[0] ?? '';
  return v ?? '';
}

export class MediaDownloader {
  private readonly resolve: Resolver;
  private readonly dial: Dialer;

  constructor(private readonly opts: DownloaderOptions) {
    this.resolve = opts.resolve ?? systemResolve;
    this.dial = opts.dial ?? tcpDial;
  }

  /**
   * Fetches `rawUrl`. `signal` is the request's (and the fan-out's) cancellation: when it fires the
   * download ends with a {@link CancelledError}; the download's own timeout is added here.
   */
  async download(rawUrl: string, signal: AbortSignal, log: Logger): Promise<DownloadedImage> {
    const bound = deadline(signal, this.opts.timeoutMs);
    try {
      return await this.follow(rawUrl, bound.signal, log);
    } catch (err) {
      if (signal.aborted) throw new CancelledError();
      if (err instanceof BadRequestError || err instanceof MediaDownloadError) throw err;
      if (bound.timedOut) throw new MediaDownloadError(`timed out after ${this.opts.timeoutMs} ms`);
      const e = err as { code?: string; message?: string };
      throw new MediaDownloadError(`request failed: ${e.code ?? e.message ?? 'unknown error'}`);
    } finally {
      bound.dispose();
    }
  }

  private async follow(rawUrl: string, signal: AbortSignal, log: Logger): Promise<DownloadedImage> {
    let url = this.parse(rawUrl);
    for (let redirects = 0; ; redirects++) {
      this.checkUrl(url, redirects > 0);
      const { client, res } = await this.request(url, signal, log);
      try {
        const location = headerValue(res.headers['location']);
        if (REDIRECT_STATUSES.has(res.statusCode) && location !== '') {
          discard(res.body);
          if (redirects + 1 >= MAX_REDIRECTS) throw new MediaDownloadError(`stopped after ${MAX_REDIRECTS} redirects`);
          try {
            url = new URL(location, url);
          } catch {
            throw new MediaDownloadError('failed to parse Location header');
          }
          continue;
        }
        return await this.readImage(res, signal, log);
      } finally {
        void client.destroy().catch(() => undefined);
      }
    }
  }

  private parse(rawUrl: string): URL {
    try {
      return new URL(rawUrl);
    } catch {
      throw new BadRequestError('invalid URL');
    }
  }

  /** Scheme and allowlist: checked on the first URL and on every redirect target, before any lookup. */
  private checkUrl(url: URL, redirect: boolean): void {
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new BadRequestError(
        `${redirect ? 'redirect ' : ''}scheme ${JSON.stringify(url.protocol.slice(0, -1).slice(0, 32))} not allowed`,
      );
    }
    if (!this.opts.domains.allows(url.hostname)) {
      throw new BadRequestError(`${redirect ? 'redirect ' : ''}host ${JSON.stringify(url.hostname.slice(0, 253))} not allowed`);
    }
  }

  /**
   * Resolves the host, keeps only the addresses the guard passes, and dials them in order until one
   * connects. Only an address the guard passed is ever dialled.
   */
  private async connect(url: URL, signal: AbortSignal, log: Logger): Promise<Socket> {
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    const candidates = isIP(host) ? [host] : await this.resolve(host, signal);
    const tls = url.protocol === 'https:';
    const port = url.port !== '' ? Number(url.port) : tls ? 443 : 80;
    let lastError: unknown = null;
    let passed = 0;
    for (const candidate of candidates) {
      const verdict = this.opts.guard.check(candidate);
      if (!verdict.allowed) {
        log.warn(
          { step: 'replace-media-urls', host, address: candidate, reason: verdict.reason },
          'media download: destination address blocked',
        );
        continue;
      }
      passed++;
      try {
        return await this.dial(
          { ip: verdict.address, family: verdict.family, port, tls, servername: isIP(host) ? undefined : host },
          signal,
        );
      } catch (err) {
        if (signal.aborted) throw err;
        lastError = err;
      }
    }
    if (passed === 0) {
      if (candidates.length === 0) throw new MediaDownloadError(`no address for host ${JSON.stringify(host.slice(0, 253))}`);
      throw new BadRequestError('destination address not allowed');
    }
    // Not `instanceof Error`: socket errors may come from another realm (e.g. under a test runner).
    throw lastError ?? new MediaDownloadError('connect failed');
  }

  private async request(url: URL, signal: AbortSignal, log: Logger) {
    const socket = await this.connect(url, signal, log);
    // The socket is handed to undici below; until then an error must not be an uncaught event.
    socket.on('error', () => undefined);
    let handedOver = false;
    const client = new UndiciClient(url.origin, {
      connect: (_opts, cb) => {
        if (handedOver) {
          // A second connection would bypass the guard: this client has exactly one socket.
          cb(new Error('connection closed'), null);
          return;
        }
        handedOver = true;
        // undici expects the callback after connect() has returned (a synchronous one stalls it).
        setImmediate(() => cb(null, socket));
      },
      pipelining: 1,
      headersTimeout: this.opts.timeoutMs,
      bodyTimeout: this.opts.timeoutMs,
    });
    try {
      const res = await undiciRequest.call(client, {
        method: 'GET',
        path: url.pathname + url.search,
        headers: { 'user-agent': USER_AGENT, 'accept-encoding': 'gzip' },
        signal,
      });
      return { client, res };
    } catch (err) {
      if (!handedOver) socket.destroy();
      void client.destroy().catch(() => undefined);
      throw err;
    }
  }

  private async readImage(
    res: { statusCode: number; headers: Record<string, string | string[] | undefined>; body: Readable },
    signal: AbortSignal,
    log: Logger,
  ): Promise<DownloadedImage> {
    if (res.statusCode !== 200) {
      // Kept for the log only; the client never sees an image host's answer.
      const body = await readCapped(res.body, UPSTREAM_ERROR_BODY_CAP).catch(() => ({ data: Buffer.alloc(0), over: false }));
      log.debug({ step: 'replace-media-urls', status: res.statusCode, body: body.data.toString('utf8') }, 'media download: non-200 answer');
      throw new MediaDownloadError(`HTTP ${res.statusCode}`, res.statusCode);
    }
    const max = this.opts.maxBytes;
    const gzip = headerValue(res.headers['content-encoding']).trim().toLowerCase() === 'gzip';
    let body: Readable = res.body;
    if (gzip) {
      // As Go's transport: gzip we asked for is undone transparently, Content-Length then describes
      // the compressed bytes and is ignored, and the cap applies to what we would inline.
      const gunzip = createGunzip();
      body = pipeline(res.body, gunzip, () => undefined);
    } else {
      const declared = Number(headerValue(res.headers['content-length']));
      if (Number.isFinite(declared) && declared > max) {
        discard(res.body);
        throw new BadRequestError(`response too large: Content-Length ${declared} exceeds max ${max}`);
      }
    }
    const { data, over } = await readCapped(body, max + 1);
    if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('aborted');
    if (over || data.length > max) throw new BadRequestError(`response too large: body exceeds max ${max}`);
    const contentType = headerValue(res.headers['content-type']);
    return { data, contentType: contentType === '' ? DEFAULT_CONTENT_TYPE : contentType };
  }
}
