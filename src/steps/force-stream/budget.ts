/**
 * The buffered path's memory bound (reference §12.3.3): one process-wide budget of bytes that
 * concurrent buffered force-stream requests reserve up front, from their token limit and choice
 * count, and release on every exit.
 */

export const BYTES_PER_TOKEN = 16;
export const CHOICE_ENVELOPE_BYTES = 256;
export const BASE_ENVELOPE_BYTES = 2048;

/**
 * The reservation for `tokens` output tokens in each of `choices` choices under the per-request
 * cap, or `null` when it cannot be bounded within the cap ("unbounded": pass through).
 */
export function reservationBytes(cap: number, tokens: number, choices: number): number | null {
  if (cap <= BASE_ENVELOPE_BYTES) return null;
  const room = cap - BASE_ENVELOPE_BYTES;
  if (tokens > Math.floor((room - CHOICE_ENVELOPE_BYTES) / BYTES_PER_TOKEN)) return null;
  const perChoice = tokens * BYTES_PER_TOKEN + CHOICE_ENVELOPE_BYTES;
  if (choices > Math.floor(room / perChoice)) return null;
  return choices * perChoice + BASE_ENVELOPE_BYTES;
}

export class ReservationBudget {
  private reserved = 0;

  constructor(
    readonly totalBytes: number,
    /** Told the bytes currently reserved after every change (the buffered-bytes gauge). */
    private readonly onChange: (reservedBytes: number) => void = () => undefined,
  ) {}

  get reservedBytes(): number {
    return this.reserved;
  }

  /** Reserves `bytes` if they fit; the returned release is idempotent. `null` when the budget is full. */
  tryReserve(bytes: number): (() => void) | null {
    if (bytes > this.totalBytes - this.reserved) return null;
    this.reserved += bytes;
    this.onChange(this.reserved);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.reserved -= bytes;
      this.onChange(this.reserved);
    };
  }
}
