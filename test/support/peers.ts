/**
 * Real peers for the suites that need them (test/peers/): prebuilt binaries from `$PEERS_BIN`,
 * and readers for what the peers saw (llm-d-inference-sim `--log-http` blocks, Envoy's access log).
 * Nothing here builds a peer.
 */
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAccessLogLine } from '../../launch/epp-topology';
import { sleep } from '../../launch/ports';

export const PEER_BINARIES = ['llm-d-inference-sim', 'epp', 'coordinator', 'llm-d-async'] as const;
export type PeerBinary = (typeof PEER_BINARIES)[number];

/** Why the real-peer suites (or one that needs only `needed`) cannot run here, or undefined when they can. */
export function peersSkipReason(needed: readonly PeerBinary[] = PEER_BINARIES): string | undefined {
  const dir = process.env['PEERS_BIN'];
  if (!dir) return 'PEERS_BIN is unset';
  const missing = needed.filter((b) => {
    try {
      accessSync(join(dir, b), constants.X_OK);
      return false;
    } catch {
      return true;
    }
  });
  return missing.length > 0 ? `PEERS_BIN=${dir} lacks ${missing.join(', ')}` : undefined;
}

export function peerBin(name: PeerBinary): string {
  return join(process.env['PEERS_BIN'] ?? '', name);
}

/** One request as llm-d-inference-sim's `--log-http` printed it. */
export interface SimHttpRequest {
  readonly method: string;
  readonly uri: string;
  /** Lower-cased names. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  /** The body parsed as JSON, or undefined. */
  readonly json: unknown;
}

/** Go's strconv.Quote output back to the string (it is JSON's, plus `\x..` and `\a\v`). */
function unquoteGo(quoted: string): string {
  const jsonish = quoted
    .replace(/\\x([0-9a-fA-F]{2})/g, '\\u00$1')
    .replace(/\\a/g, '\\u0007')
    .replace(/\\v/g, '\\u000b');
  return JSON.parse(`"${jsonish}"`) as string;
}

function kvString(record: string, key: string): string | undefined {
  const m = new RegExp(`\\s${key}="((?:[^"\\\\]|\\\\.)*)"`).exec(record);
  return m ? unquoteGo(m[1]!) : undefined;
}

/**
 * Every "HTTP request" block in a simulator's log (klog text: `key="quoted"`, multi-line values as
 * `key=<\n\tline\n >`). Scrapes of `/metrics` and `/health` are left out.
 */
export function readSimRequests(logPath: string): SimHttpRequest[] {
  if (!existsSync(logPath)) return [];
  // The simulator may be writing its last record while we read: a large body can be cut off mid-line
  // (seen with the `stop` limit case: the headers were there, the body was not yet JSON). A record
  // ends with a newline, so whatever follows the last one is left for the next read.
  const written = readFileSync(logPath, 'utf8');
  const text = written.slice(0, written.lastIndexOf('\n') + 1);
  const out: SimHttpRequest[] = [];
  // A klog record starts with its severity letter and the date: I1201 14:20:00.123456 ...
  for (const record of text.split(/\n(?=[IWEF]\d{4} )/)) {
    if (!record.includes('"HTTP request"')) continue;
    const method = kvString(record, 'method') ?? '';
    const uri = kvString(record, 'requestURI') ?? '';
    if (method === 'GET') continue;
    const headers: Record<string, string> = {};
    const block = /\sheaders=<\n([\s\S]*?)\n\s*>/.exec(record);
    const lines = block ? block[1]!.split('\n') : (kvString(record, 'headers') ?? '').split('\n');
    for (const line of lines) {
      const l = line.replace(/^\t/, '');
      const colon = l.indexOf(': ');
      if (colon > 0) headers[l.slice(0, colon).toLowerCase()] = l.slice(colon + 2);
    }
    let body = kvString(record, 'body') ?? '';
    if (!body) {
      const mb = /\sbody=<\n([\s\S]*?)\n\s*>/.exec(record);
      if (mb)
        body = mb[1]!
          .split('\n')
          .map((l) => l.replace(/^\t/, ''))
          .join('\n');
    }
    let json: unknown;
    try {
      json = JSON.parse(body);
    } catch {
      json = undefined;
    }
    out.push({ method, uri, headers, body, json });
  }
  return out;
}

/** The requests that carried `x-request-id: id`, across the given simulator logs. */
export function simRequestsFor(logPaths: readonly string[], id: string): Array<SimHttpRequest & { log: string }> {
  return logPaths.flatMap((log) =>
    readSimRequests(log)
      .filter((r) => r.headers['x-request-id'] === id)
      .map((r) => ({ ...r, log })),
  );
}

/** The requests matching `pred`, across the given simulator logs. */
export function simRequestsMatching(
  logPaths: readonly string[],
  pred: (r: SimHttpRequest) => boolean,
): Array<SimHttpRequest & { log: string }> {
  return logPaths.flatMap((log) =>
    readSimRequests(log)
      .filter(pred)
      .map((r) => ({ ...r, log })),
  );
}

/** Envoy access-log lines (the topology's `key=value` format), parsed. */
export function readAccessLog(path: string): Array<Record<string, string>> {
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .map(parseAccessLogLine)
    .filter((e): e is Record<string, string> => e !== null);
}

/** Polls `read` until `pred` holds for its result (Envoy and klog flush periodically). */
export async function eventually<T>(read: () => T, pred: (v: T) => boolean, what: string, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = read();
    if (pred(v)) return v;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last value: ${JSON.stringify(v).slice(0, 3000)}`);
    await sleep(100);
  }
}
