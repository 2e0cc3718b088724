/**
 * Where the service's JSON log lines go: a file descriptor (stderr), written in batches.
 *
 * Why batches: at the default level (info) every request logs two or three lines (step timings,
 * "sending requests"; the upstream coordinator's lines, which operators grep for). One synchronous
 * write(2) per line was the largest single item in the service's CPU profile under load. Lines are
 * now held until {@link BATCH_BYTES} accumulate or {@link FLUSH_MS} pass, then written with one
 * synchronous write, in order.
 *
 * When the log has been quiet for FLUSH_MS (a request a second, say), the first line is written at
 * the end of the event-loop turn that logged it instead: waiting for company there only woke an
 * otherwise idle process once more per request, and no company came. Under load every line finds
 * a batch already waiting, so there are at most two writes per FLUSH_MS.
 *
 * What this costs: a line reaches stderr up to FLUSH_MS late. Every exit that runs JavaScript
 * (process.exit, the end of a drain, an uncaught exception) flushes what is held first; only a
 * SIGKILL or a crash of the runtime itself loses the lines of the last FLUSH_MS.
 *
 * Synchronous writes, as pino.destination(2) does by default: no worker thread and no buffered
 * copy that grows while a slow reader holds the pipe. A full non-blocking pipe (EAGAIN) is
 * retried, as before, so a log line is delayed, never dropped.
 */
import { writeSync } from 'node:fs';

/** Written at once when this much is held (a few dozen lines). */
export const BATCH_BYTES = 16 * 1024;
/** The longest a line waits for company. */
export const FLUSH_MS = 100;
const EAGAIN_PAUSE_MS = 1;
const pause = new Int32Array(new SharedArrayBuffer(4));

export class BatchedLogDestination {
  private held: string[] = [];
  private bytes = 0;
  /** The pending flush of what is held: a timer while the log is busy, an immediate after a quiet spell. */
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  /** When the last batch was written (performance.now()); -Infinity before the first. */
  private lastWrite = -Infinity;
  private readonly flushLater = (): void => {
    this.timer = undefined;
    this.immediate = undefined;
    this.flush();
  };

  constructor(
    private readonly fd: number = 2,
    private readonly batchBytes: number = BATCH_BYTES,
    private readonly flushMs: number = FLUSH_MS,
  ) {
    process.on('exit', () => this.flush());
  }

  /** pino calls this with one serialised line (newline included). */
  write(line: string): boolean {
    this.held.push(line);
    this.bytes += line.length;
    if (this.bytes >= this.batchBytes) this.flush();
    else if (this.timer === undefined && this.immediate === undefined) {
      // The immediate stays referenced: an unreferenced one would let the loop sleep in poll first.
      // A held line never keeps the process alive past that; the exit hook writes it.
      if (performance.now() - this.lastWrite >= this.flushMs) this.immediate = setImmediate(this.flushLater);
      else this.timer = setTimeout(this.flushLater, this.flushMs).unref();
    }
    return true;
  }

  /** Writes everything held now (pino's `logger.flush()` calls it too). */
  flush(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.immediate !== undefined) {
      clearImmediate(this.immediate);
      this.immediate = undefined;
    }
    if (this.held.length === 0) return;
    const text = this.held.length === 1 ? this.held[0]! : this.held.join('');
    this.held = [];
    this.bytes = 0;
    writeAll(this.fd, Buffer.from(text, 'utf8'));
    this.lastWrite = performance.now();
  }
}

function writeAll(fd: number, buf: Buffer): void {
  let off = 0;
  while (off < buf.length) {
    try {
      off += writeSync(fd, buf, off, buf.length - off);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // A closed stderr (EPIPE, EBADF) has nobody to tell: drop the batch rather than crash.
      if (code !== 'EAGAIN' && code !== 'EBUSY') return;
      Atomics.wait(pause, 0, 0, EAGAIN_PAUSE_MS);
    }
  }
}
