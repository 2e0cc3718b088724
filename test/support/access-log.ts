/** Reads the JSON access log the Envoy bootstrap writes (one object per line, both listeners). */
import { existsSync, readFileSync } from 'node:fs';
import { sleep } from '../../launch/ports';

/** One line, as the bootstrap's `json_format` writes it; missing values are `null`. */
export interface AccessLogEntry {
  readonly listener: 'public' | 'gateway';
  readonly start_time: string;
  readonly method: string;
  readonly path: string;
  readonly response_code: number;
  readonly response_code_details: string | null;
  readonly flags: string | null;
  readonly duration: number;
  readonly upstream_cluster: string | null;
  readonly upstream_host: string | null;
  readonly x_request_id: string | null;
  readonly epp_profile: string | null;
  // Public listener only: the coordinator's dynamic metadata (namespace epd.coordinator).
  readonly request_id?: string | null;
  readonly path_taken?: string | null;
  readonly steps?: string | null;
  readonly step_ms?: Record<string, number> | null;
  readonly total_ms?: number | null;
  readonly token_count?: number | null;
  readonly mm_entries?: number | null;
  readonly status?: number | string | null;
  readonly error_step?: string | null;
  readonly error_class?: string | null;
  readonly upstream_status?: number | null;
  readonly disaggregation?: string | null;
  readonly ext_proc?: string | null;
  readonly [key: string]: unknown;
}

export class AccessLog {
  constructor(readonly path: string) {}

  /** Every complete line so far (a torn last line is skipped until it is complete). */
  entries(): AccessLogEntry[] {
    if (!existsSync(this.path)) return [];
    const out: AccessLogEntry[] = [];
    for (const line of readFileSync(this.path, 'utf8').split('\n')) {
      if (!line.trim()) continue;
      try {
        out.push(JSON.parse(line) as AccessLogEntry);
      } catch {
        // partial line still being flushed
      }
    }
    return out;
  }

  /** The first entry matching `pred`, polling until `timeoutMs` (Envoy flushes the file periodically). */
  async waitFor(pred: (e: AccessLogEntry) => boolean, timeoutMs = 5000): Promise<AccessLogEntry> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.entries().find(pred);
      if (hit) return hit;
      if (Date.now() >= deadline) {
        throw new Error(
          `no access-log entry matched within ${timeoutMs} ms; last lines:\n${this.entries()
            .slice(-5)
            .map((e) => JSON.stringify(e))
            .join('\n')}`,
        );
      }
      await sleep(50);
    }
  }
}
