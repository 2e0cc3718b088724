/** Public types of the worker simulator (a small stand-in for llm-d-inference-sim). */

export type SimRole = 'any' | 'encode' | 'prefill' | 'decode' | 'render';
export type SimMode = 'echo' | 'random';

export interface SimulatorOptions {
  /** Only loopback is allowed; default 127.0.0.1. */
  host?: '127.0.0.1';
  /** 0 (default) = ephemeral. */
  port?: number;
  /** Sent on every answer as `x-inference-pod`. */
  name: string;
  /** `encode` adds `ec_transfer_params` and answers `'!'` tokens like `--mm-encoder-only`; others are labels. */
  role?: SimRole;
  /** `echo` (default): the reply is the prompt; `random`: words from a small fixed vocabulary. */
  mode?: SimMode;
  /** Pause between streamed tokens (and per extra token of a non-streamed answer). Default 0. */
  interTokenLatencyMs?: number;
  /** Pause before the first token. Default 0. */
  timeToFirstTokenMs?: number;
  /** Request bodies above this get 413. Default 128 MiB. */
  maxBodyBytes?: number;
  /** Recorded requests kept (oldest dropped first). Default 1000. */
  maxRecordedRequests?: number;
  /** Total recorded body bytes kept (oldest dropped first; the newest is always kept). Default 256 MiB. */
  maxRecordedBytes?: number;
  /**
   * Stand in for the EPP's conditional-decode gate (sim/prefix-cache.ts): a completion request with
   * `Prefer: if-available` gets 412 unless its prompt prefix was served before by a normal request.
   * Meant for the decode role. Default false (the real simulator has no such logic).
   */
  honourPreferIfAvailable?: boolean;
  /** Prompt tokens that make up "the prefix" for the gate above. Default 16. */
  prefixTokens?: number;
  /**
   * Serve `POST /v1/responses/render`, for tests of the render step's native Responses route.
   * Default false: llm-d-inference-sim and vLLM's render service have no such route (404).
   */
  responsesRender?: boolean;
}

export interface RecordedRequest {
  /** 1, 2, 3, ... per simulator, never reset. */
  readonly seq: number;
  readonly method: string;
  /** Path without the query string. */
  readonly path: string;
  /** The raw request target. */
  readonly url: string;
  /** Lower-case names; repeated headers joined with ", ". */
  readonly headers: Readonly<Record<string, string>>;
  /** Empty when the body was refused as too large. */
  readonly body: Buffer;
  /** The parsed body, or undefined when empty or not JSON. */
  readonly json: unknown;
  /** Date.now() when the body was complete (or the client went away). */
  readonly receivedAt: number;
  /** The client closed the connection before the response was complete. */
  closedEarly: boolean;
  /** The status sent, undefined when none was (hang, reset, client gone). */
  status: number | undefined;
}

export interface FaultRule {
  /** All given fields must match; none given = every request (control paths `/__sim/*` excluded). */
  match?: { path?: string; profile?: string };
  /** Answer this status instead of the normal answer. */
  status?: number;
  /** Body of the `status` answer; default an OpenAI-style JSON error. */
  body?: string;
  /**
   * Extra response headers: of the `status` answer (e.g. the EPP's `x-llm-d-request-dropped-reason`),
   * or, without `status`, of the normal answer (e.g. an EPP's `x-peer-topology`).
   */
  headers?: Record<string, string>;
  /** Pause before the response headers. */
  delayMs?: number;
  /** Never answer (the connection stays open until the client or `close()` ends it). */
  hang?: boolean;
  /** Destroy the connection instead of answering. */
  reset?: boolean;
  /** Send the headers and part of the body, then destroy the connection. */
  resetMidBody?: boolean;
  /** Extra pause between body writes (SSE frames; a JSON body is then written in 4 pieces). */
  chunkDelayMs?: number;
  /** Apply to the next N matching requests only; default unlimited. */
  times?: number;
}

export interface Simulator {
  readonly port: number;
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly name: string;
  readonly role: SimRole;
  /** Live list of what was received, oldest first (bounded). Control requests are not recorded. */
  readonly requests: RecordedRequest[];
  /** Forget recorded requests. */
  clear(): void;
  /** Forget the prompt prefixes served so far (the `honourPreferIfAvailable` gate misses again). */
  forgetPrefixes(): void;
  /** Replace the fault rules (validated; throws SimulatorConfigError). */
  setFaults(rules: FaultRule[]): void;
  /** Resolves with the recorded requests once at least n are recorded. Default timeout 5 s. */
  waitForRequests(n: number, timeoutMs?: number): Promise<RecordedRequest[]>;
  /** Resolves with the first recorded request that matches and whose client closed early. Default timeout 5 s. */
  waitForClose(predicate: (req: RecordedRequest) => boolean, timeoutMs?: number): Promise<RecordedRequest>;
  /** Stops listening and destroys open connections. */
  close(): Promise<void>;
}
