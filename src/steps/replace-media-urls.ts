/**
 * `replace-media-urls`: every image of a chat request becomes inline data before
 * render sees it. `data:` URLs are validated; http(s) URLs are downloaded (bounded, SSRF-guarded)
 * and rewritten to `data:<type>;base64,...`. One multimodal entry is seeded per image, in order.
 */
import type { JsonObject, MultimodalEntry, RequestContext } from '../pipeline/context';
import { ConfigError } from '../config/errors';
import { BadRequestError, CancelledError } from '../pipeline/errors';
import { ParamReader } from '../pipeline/params';
import type { Step, StepDeps, StepFactory, StepParams } from '../pipeline/step';
import { AddressGuard } from './media/address-guard';
import { isAllowedImageContentType, isDataUri, parseDataUri } from './media/data-uri';
import { DomainAllowlist } from './media/domain-allowlist';
import { describeUrl, MediaDownloader, MediaDownloadError } from './media/downloader';
import { parseRange, type IpRange } from './media/ip-address';
import type { Dialer, Resolver } from './media/network';
import { isJsonObject, jsonTypeName, RESPONSES_IMAGE_PART, RESPONSES_PATH } from './wire';

export const REPLACE_MEDIA_URLS_STEP = 'replace-media-urls';

const BYTES_PER_MB = 1024 * 1024;
/**
 * Upstream allows up to (MaxInt-1)/1 MiB. An image is inlined as one base64 string inside one
 * JSON body, and V8 strings stop at ~512 Mi characters, so the bound here is far lower.
 */
export const MAX_DOWNLOAD_SIZE_MB = 256;

export interface ReplaceMediaUrlsConfig {
  readonly downloadTimeoutMs: number;
  readonly maxConcurrentDownloads: number;
  /** 0 = unlimited. */
  readonly maxMultimodalEntries: number;
  readonly maxDownloadBytes: number;
  readonly allowPrivateNetworks: boolean;
  /** Lower-cased host names; empty = any host. */
  readonly allowedDomains: readonly string[];
  /** Ranges exempt from the address guard (not upstream; empty by default). */
  readonly allowedIpRanges: readonly IpRange[];
}

function stringListParam(step: string, params: StepParams, key: string): string[] {
  const v = params[key];
  if (v === undefined || v === null) return [];
  // A bare string is refused rather than read as one entry: a typo must not silently turn a
  // security allowlist into something other than what the operator wrote.
  if (!Array.isArray(v)) throw new ConfigError(`${step}.params.${key}`, 'a list of strings', v);
  for (const item of v)
    if (typeof item !== 'string') throw new ConfigError(`${step}.params.${key}`, 'a list of strings (every entry a string)', item);
  return v as string[];
}

/** Reads and validates the params (defaults as upstream). Throws ConfigError. */
export function readReplaceMediaUrlsConfig(params: StepParams): ReplaceMediaUrlsConfig {
  const s = REPLACE_MEDIA_URLS_STEP;
  const p = new ParamReader(s, params);
  const downloadTimeoutMs = p.durationMs('download_timeout', 10_000);
  // Go reads 0 as "no timeout"; a download must always be bounded here.
  if (downloadTimeoutMs <= 0)
    throw new ConfigError(`${s}.params.download_timeout`, 'a positive duration such as "10s"', params['download_timeout']);
  const ranges = stringListParam(s, params, 'allowed_ip_ranges').map((text) => {
    const r = parseRange(text);
    if (!r) throw new ConfigError(`${s}.params.allowed_ip_ranges`, 'CIDR ranges such as "127.0.0.1/32"', text);
    // A catch-all would switch the guard off; that is never what a range list means.
    if (r.prefix === 0) throw new ConfigError(`${s}.params.allowed_ip_ranges`, 'ranges narrower than the whole address space', text);
    return r;
  });
  return {
    downloadTimeoutMs,
    maxConcurrentDownloads: p.int('max_concurrent_downloads', 10, { min: 1 }),
    maxMultimodalEntries: p.int('max_multimodal_entries', 0, { min: 0 }),
    maxDownloadBytes: p.int('max_download_size', 10, { min: 1, max: MAX_DOWNLOAD_SIZE_MB }) * BYTES_PER_MB,
    allowPrivateNetworks: p.bool('allow_private_networks', false),
    allowedDomains: stringListParam(s, params, 'allowed_domains').map((d) => d.toLowerCase()),
    allowedIpRanges: ranges,
  };
}

/**
 * Enough of a URL to tell a `data:` URL and read its header (media type and parameters) without
 * decoding a multi-megabyte payload that is forwarded untouched anyway.
 */
const URL_HEAD_CHARS = 1024;

/** One `image_url` part found in the body, with the object whose `url` may be rewritten. */
export interface ImageRef {
  readonly message: number;
  readonly part: number;
  /** As parsed: a big URL is a body placeholder; read it through the context. */
  readonly url: string;
  /** The object holding the URL, and its key: `image_url.url` (chat) or the part's `image_url` (responses). */
  readonly holder: JsonObject;
  readonly key: string;
}

interface Inlined {
  readonly contentType: string;
  /** The base64 payload, or how to read it when it is wanted (a big inline image). */
  readonly base64: string | (() => string);
  /** Set when the URL was downloaded and must be rewritten. */
  readonly rewrite: boolean;
}

/** The entry of one image; a big inline payload is decoded only if something reads it. */
function imageEntry(index: number, r: Inlined): MultimodalEntry {
  const entry: MultimodalEntry = { index, contentType: r.contentType };
  const base64 = r.base64;
  if (typeof base64 === 'string') {
    entry.base64Data = base64;
    return entry;
  }
  let value: string | undefined;
  Object.defineProperty(entry, 'base64Data', {
    enumerable: true,
    configurable: true,
    get: () => (value ??= base64()),
    set: (v: string | undefined) => {
      value = v;
    },
  });
  return entry;
}

/** Image parts in body order; malformed parts are skipped silently, as upstream. */
export function collectImageRefs(body: JsonObject): ImageRef[] {
  const messages = body['messages'];
  if (!Array.isArray(messages)) return [];
  const refs: ImageRef[] = [];
  messages.forEach((msg, m) => {
    if (!isJsonObject(msg) || !Array.isArray(msg['content'])) return;
    (msg['content'] as unknown[]).forEach((part, p) => {
      if (!isJsonObject(part) || part['type'] !== 'image_url') return;
      const imageUrl = part['image_url'];
      if (!isJsonObject(imageUrl) || typeof imageUrl['url'] !== 'string') return;
      refs.push({ message: m, part: p, url: imageUrl['url'] as string, holder: imageUrl, key: 'url' });
    });
  });
  return refs;
}

/**
 * `input_image` parts of a Responses request (§12.9), in body order. Their `image_url` is the URL
 * string itself; any other value there is a 400, as upstream.
 */
function collectResponsesImageRefs(body: JsonObject): ImageRef[] {
  const input = body['input'];
  if (!Array.isArray(input)) return [];
  const refs: ImageRef[] = [];
  input.forEach((item, m) => {
    if (!isJsonObject(item) || !Array.isArray(item['content'])) return;
    (item['content'] as unknown[]).forEach((part, p) => {
      if (!isJsonObject(part) || part['type'] !== RESPONSES_IMAGE_PART) return;
      const url = part['image_url'];
      if (typeof url !== 'string')
        throw new BadRequestError(`input[${m}].content[${p}].image_url must be a string, got ${jsonTypeName(url)}`);
      refs.push({ message: m, part: p, url, holder: part, key: 'image_url' });
    });
  });
  return refs;
}

class ReplaceMediaUrlsStep implements Step {
  readonly type = REPLACE_MEDIA_URLS_STEP;

  constructor(
    private readonly cfg: ReplaceMediaUrlsConfig,
    private readonly downloader: MediaDownloader,
  ) {}

  async execute(ctx: RequestContext): Promise<void> {
    const refs = ctx.originalPath.includes(RESPONSES_PATH) ? collectResponsesImageRefs(ctx.body) : collectImageRefs(ctx.body);
    if (refs.length === 0) return;
    const max = this.cfg.maxMultimodalEntries;
    if (max > 0 && refs.length > max) throw new BadRequestError(`too many multimodal entries: got ${refs.length}, max ${max}`);

    const results = await this.inlineAll(ctx, refs);
    if (ctx.signal.aborted) throw new CancelledError();

    // Only now, with every image in hand, is the body touched: a failure leaves it as it came.
    for (let i = 0; i < refs.length; i++) {
      const r = results[i]!;
      if (r.rewrite && typeof r.base64 === 'string') refs[i]!.holder[refs[i]!.key] = `data:${r.contentType};base64,${r.base64}`;
      ctx.multimodalEntries.push(imageEntry(ctx.multimodalEntries.length, r));
    }
    ctx.log.debug({ step: REPLACE_MEDIA_URLS_STEP, images: refs.length }, 'complete');
  }

  /**
   * Data URLs are checked in order as they come; downloads run at most `max_concurrent_downloads`
   * at a time. The first failure (of either kind) cancels every download still running.
   */
  private async inlineAll(ctx: RequestContext, refs: readonly ImageRef[]): Promise<Inlined[]> {
    const results = new Array<Inlined>(refs.length);
    const group = new AbortController();
    const signal = AbortSignal.any([ctx.signal, group.signal]);
    const running = new Set<Promise<void>>();
    let firstError: unknown = null;
    const fail = (err: unknown): void => {
      if (firstError === null) firstError = err;
      group.abort();
    };

    for (let i = 0; i < refs.length; i++) {
      if (signal.aborted) break;
      const ref = refs[i]!;
      const head = ctx.textHead(ref.url, URL_HEAD_CHARS);
      if (isDataUri(head)) {
        try {
          results[i] = this.inlineDataUri(ctx, ref, head);
        } catch (err) {
          fail(err);
          break;
        }
        continue;
      }
      while (running.size >= this.cfg.maxConcurrentDownloads) await Promise.race(running);
      if (signal.aborted) break;
      const url = ctx.text(ref.url);
      const task = this.downloader
        .download(url, signal, ctx.log)
        .then(
          (img) => {
            results[i] = { contentType: img.contentType, base64: img.data.toString('base64'), rewrite: true };
          },
          (err: unknown) => fail(wrapDownloadError(url, err)),
        )
        .finally(() => running.delete(task));
      running.add(task);
    }
    await Promise.all(running);

    if (ctx.signal.aborted) throw new CancelledError();
    if (firstError !== null) throw firstError;
    return results;
  }

  /** `head` is the URL's first {@link URL_HEAD_CHARS} characters; the whole URL is read only when needed. */
  private inlineDataUri(ctx: RequestContext, ref: ImageRef, head: string): Inlined {
    const whole = head.length < URL_HEAD_CHARS;
    let parsed;
    try {
      // The header ends at the first comma: when the head holds it, the head parses the same.
      parsed = parseDataUri(whole || head.includes(',') ? head : ctx.text(ref.url));
    } catch (err) {
      throw new BadRequestError(`parsing data URI at message ${ref.message} part ${ref.part}: ${(err as Error).message}`);
    }
    if (!isAllowedImageContentType(parsed.contentType)) {
      throw new BadRequestError(
        `data URI content type ${JSON.stringify(parsed.contentType.slice(0, 100))} not allowed at message ${ref.message} part ${ref.part}`,
      );
    }
    if (whole) return { contentType: parsed.contentType, base64: parsed.base64, rewrite: false };
    const base64 = (): string => {
      const url = ctx.text(ref.url);
      return url.slice(url.indexOf(',') + 1);
    };
    return { contentType: parsed.contentType, base64, rewrite: false };
  }
}

/** Keeps the class (400 / 502 / cancelled) and names the URL, bounded and without credentials. */
function wrapDownloadError(url: string, err: unknown): Error {
  const what = `downloading ${describeUrl(url)}`;
  if (err instanceof CancelledError) return err;
  if (err instanceof BadRequestError) return new BadRequestError(`${what}: ${err.message}`);
  if (err instanceof MediaDownloadError) return new MediaDownloadError(`${what}: ${err.message}`, err.status);
  return new MediaDownloadError(`${what}: ${(err as Error)?.message ?? String(err)}`);
}

/** Network seams for tests: a resolver and a dialer standing in for the system's. */
export interface MediaNetwork {
  readonly resolve?: Resolver;
  readonly dial?: Dialer;
}

/** The factory, with the network seams injectable; the registered one uses the real network. */
export function replaceMediaUrlsStepFactory(network: MediaNetwork = {}): StepFactory {
  return (params: StepParams, deps: StepDeps): Step => {
    const cfg = readReplaceMediaUrlsConfig(params);
    if (cfg.allowedIpRanges.length > 0) {
      deps.log.warn(
        { step: REPLACE_MEDIA_URLS_STEP, ranges: params['allowed_ip_ranges'] },
        'media downloads: SSRF guard exemptions configured (allowed_ip_ranges)',
      );
    }
    const downloader = new MediaDownloader({
      guard: new AddressGuard({ allowPrivateNetworks: cfg.allowPrivateNetworks, allowedRanges: cfg.allowedIpRanges }),
      domains: new DomainAllowlist(cfg.allowedDomains),
      maxBytes: cfg.maxDownloadBytes,
      timeoutMs: cfg.downloadTimeoutMs,
      resolve: network.resolve,
      dial: network.dial,
    });
    return new ReplaceMediaUrlsStep(cfg, downloader);
  };
}

export const createReplaceMediaUrlsStep: StepFactory = replaceMediaUrlsStepFactory();
