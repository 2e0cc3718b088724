import type { Logger } from 'pino';
/**
 * The side-call port: what a step needs of an HTTP client bound to one base URL (the gateway, or
 * render's own address). The pipeline owns this shape; src/gateway/ implements it
 * (PooledSideCallClient), so steps and the pipeline never depend on the client's internals.
 */
export interface SideCallOptions {
  /** The step name used in errors and logs (`render`, `prefill`, `encode[2]`). */
  readonly step: string;
  /** Aborts the call when the client goes away. */
  readonly signal: AbortSignal;
  /** Time allowed until the response headers arrive. */
  readonly headersTimeoutMs?: number;
  /** Time allowed for the whole call, body included. */
  readonly totalTimeoutMs?: number;
  /** Statuses whose body is read in full; any other status reads at most 8 KiB (logs only). */
  readonly okStatuses?: readonly number[];
  /** The request's logger: at trace, the leg's redacted request and response bodies (as upstream). */
  readonly log?: Logger;
}

/**
 * An answer's headers, read one at a time. Why not a record of them all: a step reads one or two
 * of an answer's headers (the relayed ones), and building the record was about 1 % of the
 * service's CPU (a megamorphic store per header, behind a fresh object's shape transitions).
 */
export interface AnswerHeaders {
  /** The first value of the header `name` (lower case), if the answer carries it. */
  header(name: string): string | undefined;
}

/** {@link AnswerHeaders} over a record whose names are already lower case. */
export function headersOf(record: Readonly<Record<string, string>>): AnswerHeaders {
  return { header: (name) => (Object.hasOwn(record, name) ? record[name] : undefined) };
}

export interface SideCallResponse extends AnswerHeaders {
  readonly status: number;
  /** Full body for an ok status; at most UPSTREAM_ERROR_BODY_CAP (errors.ts) bytes otherwise. */
  readonly body: Buffer;
}

export interface StreamingSideCallResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  /** The body as it arrives. Iterate it to the end, or call `cancel()`. */
  readonly body: AsyncIterable<Buffer>;
  cancel(): void;
}

/**
 * A request body: text, bytes, or bytes in parts. Parts are written in order, never concatenated
 * (a large body keeps its big strings as subarrays of the client's buffer).
 */
export type SideCallBody = string | Buffer | readonly Buffer[];

/** An HTTP client bound to one base URL (the gateway, or render's own address). */
export interface SideCallClient {
  readonly baseUrl: string;
  post(path: string, headers: Record<string, string>, body: SideCallBody, opts: SideCallOptions): Promise<SideCallResponse>;
  /** Like {@link post}, but hands the body over as it streams (conditional-decode hits). */
  postStreaming(
    path: string,
    headers: Record<string, string>,
    body: SideCallBody,
    opts: SideCallOptions,
  ): Promise<StreamingSideCallResponse>;
  close(): Promise<void>;
}
