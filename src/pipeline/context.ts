import type { Logger } from 'pino';
import { PLAIN_BODY_CODEC, type BodyCodec, type JsonObject } from './json-body';
import { HOP_BY_HOP_HEADERS } from './hop-by-hop';
import { HEADER_PEER_TOPOLOGY, mostFrequent } from './response-headers';
import { headersOf, type AnswerHeaders } from './side-call';

// Steps take the body's type from the context they are handed; it is defined by the body codec.
export type { JsonObject } from './json-body';

/** One image (the only modality supported) known to the pipeline, in request order. */
export interface MultimodalEntry {
  /** Running position among the request's images (0, 1, 2, ...). */
  index: number;
  /** Set by replace-media-urls. */
  base64Data?: string;
  contentType?: string;
  /** Set by render. */
  hash?: string;
  /** Base64 msgpack from render; `""` means "resolve from the encoder cache" (sent as JSON null). */
  kwargsData?: string;
  placeholder?: { offset: number; length: number };
}

/** Headers the service owns on every side call; a client can never choose them. */
const NEVER_FORWARDED = new Set([
  ...HOP_BY_HOP_HEADERS,
  'host',
  'content-length',
  'content-type',
  'epp-profile',
  // Envoy answers a client's `Expect: 100-continue` itself; the side-call client (undici) refuses
  // to send one, so forwarding it would fail every side call.
  'expect',
  // The prefill EPP's answer about the pod it picked; a client's value would steer decode.
  HEADER_PEER_TOPOLOGY,
]);

/** An HTTP token (RFC 9110), lower-case as stored. */
const FORWARDABLE_NAME = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;
/** Control characters other than HTAB, DEL, and anything beyond latin1. */
const UNFORWARDABLE_VALUE = /[\x00-\x08\x0a-\x1f\x7f]|[^\x00-\xff]/;

/**
 * Which path a request took through prefill (access-log field `disaggregation`):
 * - `disaggregated`: a prefill leg ran and decode pulls its KV cache;
 * - `aggregated_short_prompt`: the prompt was shorter than prefill's `min_prompt_tokens`, so no
 *   prefill leg was sent and decode computes the whole prompt itself;
 * - `aggregated_fallback`: the EPP had no prefill endpoint at all and prefill's
 *   `fallback_to_decode` served the request on decode alone.
 */
export type DisaggregationPath = 'disaggregated' | 'aggregated_short_prompt' | 'aggregated_fallback';

/** What the decode step leaves for the final rewrite: the headers Envoy forwards with. */
export interface DecodeRequest {
  readonly headers: Record<string, string>;
  /** Client headers the forwarded request must not carry (lower-case names). */
  readonly removeHeaders?: readonly string[];
}

export interface RequestContextInit {
  requestId: string;
  /** The inbound path without its query string. */
  originalPath: string;
  /** Inbound headers: lower-case names, first value of each, no pseudo-headers. */
  headers: Record<string, string>;
  body: JsonObject;
  signal: AbortSignal;
  /**
   * The signal aborted once the service is done with the request (decided, or the client left),
   * called each time {@link RequestContext.finished} is read, so that a request no step waits on
   * makes none. Default: `signal`.
   */
  finished?: () => AbortSignal;
  log: Logger;
  /** How `body` came from the client's bytes (big strings kept raw); plain JSON when absent. */
  codec?: BodyCodec;
  /** `pipeline.forward_response_headers` (lower-case): relayed from phase answers to later phases. */
  relayResponseHeaders?: readonly string[];
}

/**
 * Everything about one request, for the life of one ext_proc stream. Never shared between
 * requests; steps read and write it in pipeline order.
 */
export class RequestContext {
  readonly requestId: string;
  readonly originalPath: string;
  /** Inbound headers (lower-case, first value), plus any a step stamped with {@link stampHeader}. */
  readonly headers: Readonly<Record<string, string>>;
  /**
   * The parsed client body. Steps mutate it; it is serialised once, at the end. Big strings in it
   * may be placeholders: read a string's content with {@link text}, and serialise every outbound
   * body that carries body values with {@link serialize}, never with `JSON.stringify`.
   */
  body: JsonObject;
  /** How {@link body} maps back to the client's bytes. */
  readonly codec: BodyCodec;
  /** `body.model` when it is a string, else `""`. */
  readonly model: string;
  /** True only when `body.stream` is the boolean `true`. */
  readonly stream: boolean;
  /** Aborted when Envoy ends the stream (the client went away). */
  readonly signal: AbortSignal;
  readonly log: Logger;

  /** Set by render: the prompt's token ids, produced once and reused by every leg. */
  tokenIds: number[] | null = null;
  multimodalEntries: MultimodalEntry[] = [];
  /** Set by encode through the EC connector: single-request maps `{mm_hash: descriptor}`. */
  ecTransferParams: Array<Record<string, unknown>> | null = null;
  /** Set by prefill from its response; `null` when the response carried none. */
  kvTransferParams: Record<string, unknown> | null = {};
  /** Set by prefill; `null` when no prefill step ran. Decode adds no KV params to an aggregated request. */
  disaggregation: DisaggregationPath | null = null;
  /** Set by the terminal decode step: the request is ready to be forwarded by Envoy. */
  decode: DecodeRequest | null = null;

  private readonly finishedSignal: (() => AbortSignal) | undefined;
  private forwarded: Record<string, string> | undefined;
  private readonly stamped: Record<string, string> = {};
  /** Names of {@link RequestContextInit.relayResponseHeaders}: a client's values are never sent. */
  private readonly relayNames: ReadonlySet<string>;
  /** Values phase answers carried, for every later phase (and the decode request). */
  private readonly relayed: Record<string, string> = {};

  constructor(init: RequestContextInit) {
    this.requestId = init.requestId;
    this.originalPath = init.originalPath;
    this.headers = { ...init.headers };
    this.body = init.body;
    this.signal = init.signal;
    this.finishedSignal = init.finished;
    this.log = init.log;
    this.codec = init.codec ?? PLAIN_BODY_CODEC;
    this.model = typeof init.body['model'] === 'string' ? this.codec.text(init.body['model'] as string) : '';
    this.stream = init.body['stream'] === true;
    this.relayNames = new Set(init.relayResponseHeaders ?? []);
  }

  /**
   * Aborted once the service is done with the request: the decision is made (the forwarded decode
   * then belongs to Envoy) or the client left. Per-request holds such as a quota slot end here.
   */
  get finished(): AbortSignal {
    return this.finishedSignal?.() ?? this.signal;
  }

  /**
   * Takes the configured relay headers from a phase's answer (render, prefill): a later phase's
   * value replaces an earlier one. Lower-case names, as the side-call client reports them.
   */
  captureResponseHeaders(answer: AnswerHeaders): void {
    let changed = false;
    for (const name of this.relayNames) {
      const v = answer.header(name);
      if (v !== undefined && UNFORWARDABLE_VALUE.test(v) === false) {
        this.relayed[name] = v;
        changed = true;
      }
    }
    if (changed) this.forwarded = undefined;
  }

  /** A fan-out phase (encode): per header, the value most of its answers carried. */
  captureFanOutHeaders(answers: readonly AnswerHeaders[]): void {
    const merged: Record<string, string> = {};
    for (const name of this.relayNames) {
      const v = mostFrequent(answers.map((a) => a.header(name)).filter((x): x is string => x !== undefined));
      if (v !== undefined) merged[name] = v;
    }
    this.captureResponseHeaders(headersOf(merged));
  }

  /** The prefill answer's `x-peer-topology`, for the decode request only (PR #2319). */
  capturePeerTopology(answer: AnswerHeaders): void {
    const v = answer.header(HEADER_PEER_TOPOLOGY);
    if (v !== undefined && !UNFORWARDABLE_VALUE.test(v)) this.relayed[HEADER_PEER_TOPOLOGY] = v;
  }

  /** Headers phase answers gave the final (decode) request. */
  relayedHeaders(): Readonly<Record<string, string>> {
    return this.relayed;
  }

  /** Client headers the final request must not carry: relay names (and the topology) no phase replaced. */
  discardedClientHeaders(): string[] {
    const out: string[] = [];
    for (const name of [...this.relayNames, HEADER_PEER_TOPOLOGY]) {
      if (this.headers[name] !== undefined && this.relayed[name] === undefined && !out.includes(name)) out.push(name);
    }
    return out;
  }

  /**
   * A JSON body as bytes, with the client's big strings spliced back in from its own buffer (no
   * copy). Send the parts as they are (their total length is the content-length).
   */
  serialize(value: unknown): Buffer[] {
    return this.codec.serialize(value);
  }

  /** The real content of a string read from the body (a big one is decoded on first use). */
  text(s: string): string {
    return this.codec.text(s);
  }

  /** The first `maxChars` characters of {@link text}, without decoding the rest. */
  textHead(s: string, maxChars: number): string {
    return this.codec.textHead(s, maxChars);
  }

  /**
   * Sets a header server-side (e.g. an objective the async broker classified). It replaces any client
   * value, reaches every later side call, and is set on the request Envoy finally forwards.
   */
  stampHeader(name: string, value: string): void {
    const key = name.toLowerCase();
    (this.headers as Record<string, string>)[key] = value;
    this.stamped[key] = value;
    this.forwarded = undefined;
  }

  /** Headers stamped by steps, for the final request. */
  stampedHeaders(): Readonly<Record<string, string>> {
    return this.stamped;
  }

  /**
   * The base header set of every side call: the client's headers minus
   * hop-by-hop, content framing and the coordinator-owned `epp-profile`. Steps stamp their own
   * headers on a copy.
   */
  forwardedHeaders(): Record<string, string> {
    if (!this.forwarded) {
      const out: Record<string, string> = {};
      for (const name in this.headers) {
        const value = this.headers[name]!;
        // A name or value no HTTP client may send (Envoy never delivers one, a stray ext_proc
        // client might) is dropped rather than failing the side call, and can never inject CRLF.
        if (!NEVER_FORWARDED.has(name) && !this.relayNames.has(name) && FORWARDABLE_NAME.test(name) && !UNFORWARDABLE_VALUE.test(value))
          out[name] = value;
      }
      // Relayed answers replace client values (which are never sent); the topology goes to decode only.
      for (const [name, value] of Object.entries(this.relayed)) if (name !== HEADER_PEER_TOPOLOGY) out[name] = value;
      this.forwarded = out;
    }
    return { ...this.forwarded };
  }
}
