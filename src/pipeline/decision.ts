/**
 * The pipeline's result, and the only thing the Envoy layer learns about a request.
 *
 * `forward` rewrites the client request and lets Envoy route it; `respond` answers the client
 * locally. Errors are classified into a `respond` before they leave the pipeline, so the protocol
 * layer never sees an exception from a step.
 */

/** Values we publish as Envoy dynamic metadata (plain JSON-like data). */
export type MetadataValue = string | number | boolean | null | MetadataValue[] | { [key: string]: MetadataValue };
export type Metadata = Record<string, MetadataValue>;

export interface ForwardDecision {
  readonly kind: 'forward';
  /** Headers to set (overwrite) on the request Envoy forwards. Names are lower-case. */
  readonly setHeaders: Record<string, string>;
  /** Headers to remove from the request Envoy forwards. Names are lower-case. */
  readonly removeHeaders: readonly string[];
  /**
   * The new request body, or `null` to leave the client's body untouched. A list is one body in
   * parts (large strings are subarrays of the client's buffer): sent in order, never concatenated
   * where the protocol allows it.
   */
  readonly body: Buffer | readonly Buffer[] | null;
  readonly metadata: Metadata;
}

export interface RespondDecision {
  readonly kind: 'respond';
  readonly status: number;
  /** Response headers. Names are lower-case. */
  readonly headers: Record<string, string>;
  /** A complete body, or a stream of chunks (a response relayed while it is produced). */
  readonly body: Buffer | AsyncIterable<Buffer>;
  readonly metadata: Metadata;
}

export type Decision = ForwardDecision | RespondDecision;

/** What the protocol layer knows of an HTTP request before its body arrives. */
export interface RequestHead {
  readonly method: string;
  /** The `:path` pseudo-header, including any query string. */
  readonly path: string;
  /** Regular (non-pseudo) headers, lower-case names, first value of each. */
  readonly headers: Record<string, string>;
  /**
   * The trusted entry the request came through (e.g. `async-processor`), as the protocol layer
   * established it out of the client's reach; absent for the public entry. The header policy
   * trusts more headers for a known origin (header-policy.ts).
   */
  readonly origin?: string;
  /** The second and later values of a repeated header name (the proxy forwards them all); absent when none repeats. */
  readonly laterValues?: Readonly<Record<string, readonly string[]>>;
  /**
   * Set by the protocol layer when the request's header map leaves no room for the headers a
   * forward may add under the proxy's header-count limit (the proxy would refuse our mutation).
   */
  readonly headerBudgetExceeded?: HeaderBudget;
}

/** The request's header count against the proxy's limit, once room is left for our own headers. */
export interface HeaderBudget {
  /** Entries in the map the proxy sent: pseudo-headers, the client's and the proxy's own headers. */
  readonly entries: number;
  /** The most entries this request may have. */
  readonly allowed: number;
}

/**
 * One HTTP request being processed. Created by a {@link RequestHandler} from the request head,
 * completed once the whole body has arrived.
 */
export interface Exchange {
  /**
   * The answer when the head alone refuses the request (too many headers): the protocol layer
   * sends it at once, reads no body, and never calls {@link complete}.
   */
  readonly refused?: RespondDecision;
  /** The largest body this exchange accepts; above it the protocol layer calls {@link tooLarge}. */
  readonly maxBodyBytes: number;
  /** Runs the pipeline over the complete body. Never rejects: failures come back as `respond`. */
  complete(body: Buffer): Promise<Decision>;
  /**
   * {@link complete} for a body that arrived in chunks (in order, `length` bytes in all), when the
   * exchange can use them as they are; without it the protocol layer concatenates them first.
   */
  completeParts?(parts: readonly Buffer[], length: number): Promise<Decision>;
  /** The answer for a body over {@link maxBodyBytes}. */
  tooLarge(receivedBytes: number): Decision;
  /** Envoy ended the stream early (the client went away): abort everything in flight. */
  abort(reason: string): void;
}

export interface RequestHandler {
  /** Returns `null` for requests that pass through Envoy untouched (their body is not read). */
  begin(head: RequestHead): Exchange | null;
}
