/** A small HTTP client for the e2e suite and the bench: what a user's OpenAI client does, on loopback. */
import { Agent, request } from 'undici';

export interface ClientResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly text: string;
  /** The body parsed as JSON, or undefined when it is not JSON. */
  readonly json: unknown;
  /** Each piece of the body as the client read it, in order (for streaming assertions). */
  readonly reads: readonly string[];
}

export interface SendOptions {
  readonly headers?: Record<string, string>;
  readonly signal?: AbortSignal;
  /** Whole-request deadline. Default 30 s. */
  readonly timeoutMs?: number;
}

const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

function flatten(raw: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(raw)) if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** One client per test file (or bench run), with its own connection pool; close it when done. */
export class TestClient {
  private readonly agent = new Agent({ keepAliveTimeout: 10_000, connections: 64 });

  constructor(readonly baseUrl: string) {}

  /** POSTs a JSON value (or raw text/bytes as given) and reads the whole answer. */
  async post(path: string, body: unknown, opts: SendOptions = {}): Promise<ClientResponse> {
    const payload = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    const signals = [AbortSignal.timeout(opts.timeoutMs ?? 30_000), ...(opts.signal ? [opts.signal] : [])];
    const res = await request(this.baseUrl + path, {
      method: 'POST',
      dispatcher: this.agent,
      headers: { 'content-type': 'application/json', ...opts.headers },
      body: payload,
      signal: AbortSignal.any(signals),
    });
    const reads: string[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      const b = chunk as Buffer;
      size += b.length;
      if (size > MAX_RESPONSE_BYTES) {
        res.body.destroy();
        throw new Error(`response larger than ${MAX_RESPONSE_BYTES} bytes`);
      }
      reads.push(b.toString('utf8'));
    }
    const text = reads.join('');
    return { status: res.statusCode, headers: flatten(res.headers), text, json: parse(text), reads };
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}

/** The `data:` payloads of an SSE body, in order (`[DONE]` included as the string). */
export function sseData(text: string): string[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(5).trim());
}

/** Reads a nested value out of parsed JSON (`at(body, 'choices', 0, 'text')`); undefined if absent. */
export function at(value: unknown, ...path: Array<string | number>): unknown {
  let cur: unknown = value;
  for (const key of path) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string | number, unknown>)[key];
  }
  return cur;
}
