/**
 * The metrics' buckets and label values, bounded as upstream bounds them: what a label may hold
 * never grows with what clients send.
 */
import type { SideCallOutcome } from '../gateway/client';

/** The upstream "general latency" ladder, seconds. */
export const LATENCY_BUCKETS: readonly number[] = [
  0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600,
  900, 1200, 1800, 2700, 3600,
];
/** Request body sizes, bytes: 64 B .. 1 GiB by powers of two. */
export const SIZE_BUCKETS: readonly number[] = Array.from({ length: 25 }, (_, i) => 64 * 2 ** i);
/** Prompt tokens: 1, then 8 .. 1 Mi by powers of two. */
export const TOKEN_BUCKETS: readonly number[] = [1, ...Array.from({ length: 18 }, (_, i) => 8 * 2 ** i)];

/** Upstream's bound on distinct `model_name` values. */
export const MAX_MODEL_NAMES = 1000;
/** Longer names are not labels anyone wants, and would let one request pin megabytes in the registry. */
export const MAX_MODEL_NAME_LENGTH = 256;

/**
 * `model_name` as upstream bounds it: `""` -> `unknown`; the first {@link MAX_MODEL_NAMES} distinct
 * names keep their value, later ones become `other`. Names over {@link MAX_MODEL_NAME_LENGTH}
 * characters are `other` too (our addition).
 */
export class ModelNameLabels {
  private readonly seen = new Set<string>();

  constructor(private readonly max = MAX_MODEL_NAMES) {}

  label(model: string): string {
    if (model === '') return 'unknown';
    if (this.seen.has(model)) return model;
    if (model.length > MAX_MODEL_NAME_LENGTH || this.seen.size >= this.max) return 'other';
    this.seen.add(model);
    return model;
  }
}

export function probeResult(outcome: SideCallOutcome): string {
  if (typeof outcome !== 'number') return 'transport_error';
  if (outcome === 412) return 'deferred';
  return outcome < 400 ? 'served' : 'error';
}

export function statusLabel(outcome: SideCallOutcome): string {
  // undici reports statuses 100-999; anything else cannot come from a server and is folded.
  if (typeof outcome === 'number') return Number.isInteger(outcome) && outcome >= 100 && outcome <= 999 ? String(outcome) : 'error';
  return outcome;
}

export const KNOWN_MESSAGES: ReadonlySet<string> = new Set([
  'request_headers',
  'request_body',
  'request_trailers',
  'response_headers',
  'response_body',
  'response_trailers',
]);
