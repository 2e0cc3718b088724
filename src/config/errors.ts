/** A configuration problem found at start-up. The message names the key and what was expected. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  constructor(
    readonly key: string,
    readonly expected: string,
    got?: unknown,
  ) {
    super(`${key}: expected ${expected}${got === undefined ? '' : `, got ${describe(got)}`}`);
  }
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a map';
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? v.slice(0, 60) + '...' : v);
  return `${typeof v} ${String(v)}`;
}
