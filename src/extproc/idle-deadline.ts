/**
 * The idle deadline of one stream: fires when Envoy sent nothing for `ms` while it owed us the next
 * message. One timer per stream, pushed back (not re-created) on every message, and unref'd: a
 * server keeps the process alive; a forgotten stream must not.
 *
 * Why it exists: either Envoy's stream is gone and grpc-js never told us (grpc-js 1.14 can miss the
 * cancel of a stream reset right after it opened), or Envoy is stuck. The stream then ends with an
 * error status, not a clean end: Envoy takes an OK end as "carry on without the processor", which
 * would forward an unprocessed request (fail open); an error makes it answer its 500 instead
 * (failure_mode_allow: false), if anyone is still listening.
 */
export class IdleDeadline {
  private timer: NodeJS.Timeout | null = null;

  constructor(
    /** 0 or less: never fires. */
    readonly ms: number,
    private readonly onIdle: () => void,
  ) {}

  /** Arms or pushes back the deadline while `waiting`, else clears it. */
  watch(waiting: boolean): void {
    if (this.ms <= 0) return;
    if (!waiting) {
      this.stop();
      return;
    }
    if (this.timer) {
      this.timer.refresh();
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = null;
      this.onIdle();
    }, this.ms);
    this.timer.unref();
  }

  stop(): void {
    if (!this.timer) return;
    clearTimeout(this.timer);
    this.timer = null;
  }
}
