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
