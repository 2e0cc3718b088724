/**
 * The test processor's view of llm-d-async's messages: the envelope it pops, the ResultMessage it
 * writes, and the Go marshalling both use.
 */
import { goMarshal } from '../src/steps/async-broker/go-json';

export interface Internal {
  request_token?: string;
  request_queue_name?: string;
  result_queue_name?: string;
  retry_count?: number;
  queue_id?: string;
  labels?: Record<string, string>;
}

export interface RequestData {
  id: string;
  created?: number;
  deadline: number;
  payload: Record<string, unknown>;
  metadata?: Record<string, string>;
  headers?: Record<string, string>;
  endpoint?: string;
  request_queue_name?: string;
  result_queue_name?: string;
}

export interface Message {
  internal: Internal;
  data: RequestData;
  kind: string;
}

export type Outcome = { statusCode: number; payload: string } | { errorCode: string; errorMessage: string };

/** Go's `json.Marshal` of a generic map: sorted keys at every level, HTML-safe escaping. */
export function goMarshalSorted(v: unknown): string {
  const sort = (x: unknown): unknown => {
    if (Array.isArray(x)) return x.map(sort);
    if (x && typeof x === 'object') {
      const o = x as Record<string, unknown>;
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(o).sort()) out[k] = sort(o[k]);
      return out;
    }
    return x;
  };
  return goMarshal(sort(v));
}

/** `api.ResultMessage` in Go field order with `omitempty`. */
export function resultJson(id: string, o: Outcome): string {
  if ('statusCode' in o) return goMarshal({ id, status_code: o.statusCode, payload: o.payload });
  return goMarshal({ id, payload: goMarshal({ error: o.errorMessage }), error_code: o.errorCode, error_message: o.errorMessage });
}

export function parseMessage(raw: string): Message | null {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return null;
  }
  if (!v || typeof v !== 'object') return null;
  const o = v as Record<string, unknown>;
  const kind = o['request_kind'];
  const data = o['data'] as RequestData | undefined;
  // The AP cannot unmarshal an unknown kind or an empty data: dropped silently.
  if ((kind !== 'redis' && kind !== 'plain') || !data || typeof data !== 'object') return null;
  if (typeof data.deadline !== 'number' || !Number.isInteger(data.deadline)) return null;
  if (typeof data.id !== 'string') return null;
  const internal = { ...((o['internal'] as Internal | undefined) ?? {}) };
  return { internal, data, kind };
}
