import type { Logger } from 'pino';
import type { JsonObject } from '../../pipeline/context';
import { isJsonObject, jsonTypeName } from './json';

/**
 * Puts transfer params where vLLM's generate endpoint reads them: `sampling.extra_args` (reused
 * when it is an object, else replaced). `kv_transfer_params` is always set; `ec_transfer_params`
 * only when non-empty, so ec-shared-storage never adds the field.
 */
export function setGenerateTransferParams(
  sampling: JsonObject,
  kv: Record<string, unknown> | null,
  ec: Record<string, unknown> | null,
): void {
  let extra = sampling['extra_args'];
  if (!isJsonObject(extra)) {
    extra = {};
    sampling['extra_args'] = extra;
  }
  const target = extra as JsonObject;
  target['kv_transfer_params'] = kv;
  if (ec && Object.keys(ec).length > 0) target['ec_transfer_params'] = ec;
}

/**
 * A transfer-params value from an upstream response, as an object or `null`. A non-object is
 * logged at debug and dropped rather than failing the request; an empty object stays empty so
 * the connector's own "no metadata" handling applies.
 */
export function coerceParamsMap(v: unknown, label: string, log: Logger): Record<string, unknown> | null {
  if (v === undefined || v === null) return null;
  if (isJsonObject(v)) return v;
  log.debug({ type: jsonTypeName(v) }, `${label} is not a JSON object; skipping`);
  return null;
}

/** The transfer-params fields a worker acts on: where to pull KV blocks and encoder outputs from. */
const TRANSFER_PARAMS_FIELDS = ['kv_transfer_params', 'ec_transfer_params'] as const;

/**
 * Removes both fields from a body bound for a worker, wherever a worker reads them: the top level
 * (chat, completions, and generate in newer vLLM) and `sampling_params.extra_args` (generate).
 * They are the coordinator's to set: a client's own would point the worker at a NIXL peer (or KV
 * source) of the client's choosing.
 *
 * Only `body` itself is mutated: a nested `sampling_params` / `extra_args` that holds one of the
 * fields is replaced by a copy without it, so a shallow copy of the client body can be cleaned
 * without touching the client's.
 */
export function dropTransferParams(body: JsonObject): void {
  for (const f of TRANSFER_PARAMS_FIELDS) delete body[f];
  const sampling = body['sampling_params'];
  if (!isJsonObject(sampling)) return;
  const extra = sampling['extra_args'];
  if (!isJsonObject(extra) || !TRANSFER_PARAMS_FIELDS.some((f) => Object.prototype.hasOwnProperty.call(extra, f))) return;
  const cleanExtra: JsonObject = { ...extra };
  for (const f of TRANSFER_PARAMS_FIELDS) delete cleanExtra[f];
  body['sampling_params'] = { ...sampling, extra_args: cleanExtra };
}
