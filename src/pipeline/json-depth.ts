import { BadRequestError } from './errors';

/**
 * Deepest nesting of objects and arrays a client body may have. JSON.parse accepts any depth, but
 * JSON.stringify (every side call and the final body) overflows the stack somewhere above a few
 * thousand levels, which would turn a client's odd body into a 502. No real request nests beyond a
 * few dozen levels (tool schemas included).
 */
export const MAX_JSON_DEPTH = 512;

/** Throws {@link BadRequestError} `invalid JSON body` when `value` nests deeper than `max`. Iterative: any depth is safe to check. */
export function checkJsonDepth(value: unknown, max: number = MAX_JSON_DEPTH): void {
  if (typeof value !== 'object' || value === null) return;
  const stack: Array<{ v: object; d: number }> = [{ v: value, d: 1 }];
  while (stack.length > 0) {
    const { v, d } = stack.pop()!;
    if (d > max) throw new BadRequestError('invalid JSON body');
    const children: unknown[] = Array.isArray(v) ? v : Object.values(v);
    for (let i = 0; i < children.length; i++) {
      const c = children[i];
      if (typeof c === 'object' && c !== null) stack.push({ v: c, d: d + 1 });
    }
  }
}
