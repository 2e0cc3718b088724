/**
 * JSON the way Go's `json.NewEncoder(w).Encode(v)` writes it, for the bodies this step writes itself:
 * compact, `<`, `>`, `&`, U+2028 and U+2029 escaped, and a
 * trailing newline. Callers pass objects whose keys are already in Go's order.
 */

const GO_ESCAPES: Record<string, string> = {
  '<': '\\u003c',
  '>': '\\u003e',
  '&': '\\u0026',
  '\u2028': '\\u2028',
  '\u2029': '\\u2029',
};

/** `JSON.stringify` plus Go's HTML-safe escaping; safe because those characters only occur inside strings. */
export function goMarshal(value: unknown): string {
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => GO_ESCAPES[c]!);
}

/** {@link goMarshal} with the encoder's trailing newline, as bytes. */
export function goEncode(value: unknown): Buffer {
  return Buffer.from(goMarshal(value) + '\n', 'utf8');
}

/** A map with its keys sorted, as Go marshals `map[string]string`. */
export function sortedMap(m: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of Object.keys(m).sort()) out[k] = m[k]!;
  return out;
}
