/**
 * The queue member (llm-d-async `api.InternalRequest` with `request_kind: "redis"`) and the stored
 * result (`api.ResultMessage`), field for field as llm-d-async writes and reads them.
 */
import { randomBytes } from 'node:crypto';
import type { JsonObject } from '../../pipeline/context';
import { PLAIN_BODY_CODEC, concatParts } from '../../pipeline/json-body';
import { sortedMap } from './go-json';

export interface EnvelopeInput {
  readonly token: string;
  /** `<tenant>:<id>` */
  readonly envelopeId: string;
  readonly queue: string;
  /** The mailbox, `results:req:<tenant>:<id>`. */
  readonly resultQueue: string;
  /** Unix seconds, integers. */
  readonly created: number;
  readonly deadline: number;
  readonly payload: JsonObject;
  /** `{<quota attribute>: tenant, traceparent?}`; string values only. */
  readonly metadata: Record<string, string>;
  /** Allowlisted client headers; the field is omitted when empty. */
  readonly headers: Record<string, string>;
  readonly endpoint: string;
  /** How `payload` becomes bytes: `RequestContext.serialize` (big strings spliced back); plain JSON by default. */
  readonly serialize?: (value: unknown) => Buffer[];
}

/** A fresh generation token: 16 CSPRNG bytes as 32 lower-case hex chars, as the producer mints it. */
export function newRequestToken(): string {
  return randomBytes(16).toString('hex');
}

/**
 * The ZSET member. Field order follows Go's struct order so the bytes match the producer's, except
 * inside `payload`: Go re-marshals it through a generic map (sorted keys, HTML escaping), we keep
 * the client's key order. The AP reads it as JSON, so the two are equivalent.
 */
export function buildEnvelope(e: EnvelopeInput): string {
  if (!Number.isSafeInteger(e.created) || !Number.isSafeInteger(e.deadline)) {
    // A float here makes the AP's unmarshal fail and the message is dropped silently.
    throw new Error('created and deadline must be integer Unix seconds');
  }
  const data: Record<string, unknown> = {
    id: e.envelopeId,
    created: e.created,
    deadline: e.deadline,
    payload: e.payload,
    metadata: sortedMap(e.metadata),
  };
  if (Object.keys(e.headers).length > 0) data['headers'] = sortedMap(e.headers);
  data['endpoint'] = e.endpoint;
  data['request_queue_name'] = e.queue;
  data['result_queue_name'] = e.resultQueue;
  const serialize = e.serialize ?? PLAIN_BODY_CODEC.serialize;
  return concatParts(
    serialize({
      internal: { request_token: e.token, request_queue_name: e.queue, result_queue_name: e.resultQueue },
      request_kind: 'redis',
      data,
    }),
  ).toString('utf8');
}

/** `api.ResultMessage` as stored by the AP. */
export interface ResultMessage {
  readonly id: string;
  /** 0 when absent: an outcome with no HTTP response (see `errorCode`). */
  readonly statusCode: number;
  readonly payload: string;
  readonly errorCode: string;
  readonly errorMessage: string;
}

/** A stored entry that is not a `ResultMessage`; answered as 502 MALFORMED_RESULT, never a crash. */
export class MalformedResultError extends Error {
  override readonly name = 'MalformedResultError';
}

function field(o: Record<string, unknown>, k: string, type: 'string' | 'number'): unknown {
  const v = o[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== type) throw new MalformedResultError(`stored result field ${k} is not a ${type}`);
  return v;
}

export function parseResultMessage(raw: string): ResultMessage {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    throw new MalformedResultError('stored result is not valid JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new MalformedResultError('stored result is not a JSON object');
  const o = v as Record<string, unknown>;
  const status = field(o, 'status_code', 'number') as number | undefined;
  if (status !== undefined && !Number.isInteger(status)) throw new MalformedResultError('stored result status_code is not an integer');
  return {
    id: (field(o, 'id', 'string') as string | undefined) ?? '',
    statusCode: status ?? 0,
    payload: (field(o, 'payload', 'string') as string | undefined) ?? '',
    errorCode: (field(o, 'error_code', 'string') as string | undefined) ?? '',
    errorMessage: (field(o, 'error_message', 'string') as string | undefined) ?? '',
  };
}
