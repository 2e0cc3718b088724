/**
 * What the OpenAI SDK conformance cases (test/support/openai-cases.ts) need of a target, and the
 * helpers the cases share.
 */
import OpenAI, { APIError } from 'openai';

export type WorkerRole = 'encode' | 'prefill' | 'decode';

/** One request as a worker received it. */
export interface WorkerLeg {
  readonly path: string;
  /** Lower-cased names. */
  readonly headers: Readonly<Record<string, string>>;
  readonly json: unknown;
}

/** What a failing prefill worker answers, and how to stop it. */
export interface PrefillFailure {
  /** A phrase of the worker's error message: relayed to the client on a 4xx, never on a 5xx. */
  readonly upstreamText: string;
  restore(): Promise<void>;
}

export interface ConformanceTarget {
  /** Envoy's public listener. */
  readonly publicUrl: string;
  /** The model the workers serve. */
  readonly model: string;
  /**
   * The generation legs of request `id` that reached workers of `role` (not the conditional-decode
   * probe, which the EPP or its stand-in answered 412), once at least `atLeast` are there.
   */
  legs(role: WorkerRole, id: string, atLeast: number): Promise<WorkerLeg[]>;
  /** Every request to any worker (render included, when the target can see it) that carried `id`, now. */
  anyLegs(id: string): Promise<WorkerLeg[]>;
  /** Makes every prefill leg fail with a rate limit (429) or a server error (5xx) until `restore()`. */
  failPrefill(kind: 'rate-limit' | 'server-error'): Promise<PrefillFailure>;
}

/** What differs between targets before any of them runs (test titles are fixed then). */
export interface CaseOptions {
  /**
   * `/tokenize` is on the path allow-list but the router in front of the workers cannot route it:
   * its status and a phrase of its answer, and why.
   */
  readonly tokenizeRefusedBy?: { readonly status: number; readonly says: string; readonly why: string };
}

let seq = 0;
/** A request id, also the first word of the prompt: prompts never share a prefix (no conditional-decode hits). */
export const nextId = (what: string): string => `sdk-${what}-${process.pid}-${++seq}`;
/** A number that differs per call and per process (for token ids no earlier request used). */
export const uniqueNumber = (): number => process.pid * 7 + ++seq * 37;

export function openAiClient(target: ConformanceTarget): OpenAI {
  return new OpenAI({ baseURL: `${target.publicUrl}/v1`, apiKey: 'x', maxRetries: 0, timeout: 20_000 });
}

export const withId = (id: string) => ({ headers: { 'x-request-id': id } });

export const obj = (v: unknown): Record<string, unknown> => v as Record<string, unknown>;

/** The error a call rejected with (it must reject). */
export async function rejection(call: () => Promise<unknown>): Promise<APIError> {
  try {
    await call();
  } catch (err) {
    if (err instanceof APIError) return err;
    throw err;
  }
  throw new Error('the call succeeded; an APIError was expected');
}
