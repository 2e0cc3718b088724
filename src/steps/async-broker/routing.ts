/**
 * Model/tenant routing to a queue and tier (the `routes` param), and the
 * once-per-model log of unrouted models.
 */
import type { QueueRoute } from './config';

export interface RouteChoice {
  readonly queue: string;
  readonly tier: string;
  /** False when no route matched and the defaults were used. */
  readonly matched: boolean;
}

/** First match wins; an empty model or tenant matches anything; an empty queue or tier inherits the default. */
export function routeFor(
  routes: readonly QueueRoute[],
  defaults: { queue: string; tier: string },
  model: string,
  tenant: string,
): RouteChoice {
  for (const r of routes) {
    if (r.model !== '' && r.model !== model) continue;
    if (r.tenant !== '' && r.tenant !== tenant) continue;
    return { queue: r.queue || defaults.queue, tier: r.tier || defaults.tier, matched: true };
  }
  return { queue: defaults.queue, tier: defaults.tier, matched: false };
}

/** Route models with a non-empty `model`, de-duplicated, in config order (the `/v1/models` list). */
export function routedModels(routes: readonly QueueRoute[]): string[] {
  const out: string[] = [];
  for (const r of routes) if (r.model !== '' && !out.includes(r.model)) out.push(r.model);
  return out;
}

/**
 * Remembers which unrouted model names were already logged at info. Bounded: once full, new names
 * are no longer remembered (and are logged at debug), so hostile model names cannot grow memory.
 */
export class UnroutedModels {
  private readonly seen = new Set<string>();

  constructor(private readonly capacity = 1024) {}

  /** True the first time `model` is seen while there is room. */
  firstSighting(model: string): boolean {
    if (this.seen.has(model) || this.seen.size >= this.capacity) return false;
    this.seen.add(model);
    return true;
  }
}
