/**
 * Maps an HTTP status to one Envoy accepts in an ImmediateResponse.
 *
 * `HttpStatus.code` is validated `defined_only` and `not_in: 0`: a code missing from
 * envoy.type.v3.StatusCode makes Envoy reject the whole response (the client gets a 500 with an
 * ext_proc error). So undefined codes are replaced here, never passed on.
 */

/** Every code of envoy.type.v3.StatusCode except Empty (0); test/protocol checks it against the proto. */
export const ENVOY_STATUS_CODES: ReadonlySet<number> = new Set([
  100, 200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301, 302, 303, 304, 305, 307, 308, 400, 401, 402, 403, 404, 405, 406, 407,
  408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421, 422, 423, 424, 426, 428, 429, 431, 500, 501, 502, 503, 504, 505, 506, 507, 508,
  510, 511,
]);

/**
 * - codes below 200 (and 1xx) become 200: Envoy itself turns < 200 into 200 for local replies;
 * - a code Envoy does not define becomes the base code of its class: 2xx -> 200, 3xx -> 300,
 *   4xx -> 400 (e.g. 418, 499), 5xx -> 500 (e.g. 509, 520);
 * - anything else (NaN, >= 600, fractions) becomes 500: it can only come from a bug.
 */
export function envoyStatusCode(status: number): number {
  if (!Number.isInteger(status) || status >= 600) return 500;
  if (status < 200) return 200;
  if (ENVOY_STATUS_CODES.has(status)) return status;
  return Math.floor(status / 100) * 100;
}
