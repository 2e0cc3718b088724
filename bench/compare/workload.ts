/**
 * The requests a compare run sends, and the one timed POST that measures them: the whole response
 * and, for a stream, the time to its first byte of body (TTFT as a client sees it).
 */
import { Agent, request } from 'undici';
import type { Phase } from './stack';

export interface Case {
  readonly name: string;
  readonly phase: Phase;
  readonly path: string;
  readonly body: string;
  readonly stream: boolean;
  readonly concurrency: number;
  readonly requests: number;
  readonly timeoutMs: number;
}

export const MAX_TOKENS = 170;
/** About 1 KB of prompt: ~170 words, so an echoing decode worker answers ~170 tokens. */
export const PROMPT = Array.from({ length: 170 }, (_, i) => ['alpha', 'beta', 'gamma', 'delta', 'omega'][i % 5]).join(' ');

export function chatBody(model: string, stream: boolean): string {
  return JSON.stringify({
    model,
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: MAX_TOKENS,
    ...(stream ? { stream: true } : {}),
  });
}

/** A generate body of about `bytes` (the shape of bench/large-body.ts): 4096 token ids and one image's kwargs_data. */
export function generateBody(model: string, bytes: number): string {
  const tokenIds = Array.from({ length: 4096 }, (_, i) => (i === 0 ? 1 : 100 + (i % 30_000)));
  for (let i = 8; i < 8 + 1024; i++) tokenIds[i] = 32000;
  const skeleton = {
    model,
    token_ids: tokenIds,
    sampling_params: { max_tokens: 8 },
    features: {
      mm_hashes: { image: ['bench-image-0'] },
      mm_placeholders: { image: [{ offset: 8, length: 1024 }] },
      kwargs_data: { image: [''] },
    },
  };
  const fill = Math.max(0, bytes - JSON.stringify(skeleton).length);
  skeleton.features.kwargs_data.image[0] = Buffer.alloc(Math.ceil((fill * 3) / 4), 0x5a)
    .toString('base64')
    .slice(0, fill);
  return JSON.stringify(skeleton);
}

/** The case list of a phase; a count of 0 leaves its case out. */
export function phaseCases(
  phase: Phase,
  model: string,
  n: { fast: number; large: number; c1: number; c8: number; c32: number; streaming: boolean },
): Case[] {
  const chat = '/v1/chat/completions';
  const out: Case[] = [];
  const add = (name: string, stream: boolean, concurrency: number, requests: number, timeoutMs = 60_000) => {
    if (requests > 0) out.push({ name, phase, path: chat, body: chatBody(model, stream), stream, concurrency, requests, timeoutMs });
  };
  if (phase === 'fast') {
    add('nonstream_c1_fast', false, 1, Math.ceil(n.fast / 4));
    add('nonstream_c8_fast', false, 8, n.fast);
    add('nonstream_c32_fast', false, 32, n.fast);
    if (n.large > 0) {
      const body = generateBody(model, 20_000_000);
      out.push({
        name: 'generate_20mb_c1',
        phase,
        path: '/inference/v1/generate',
        body,
        stream: false,
        concurrency: 1,
        requests: n.large,
        timeoutMs: 120_000,
      });
    }
    return out;
  }
  add('nonstream_c1_realistic', false, 1, n.c1);
  add('nonstream_c8_realistic', false, 8, n.c8);
  add('nonstream_c32_realistic', false, 32, n.c32);
  if (n.streaming) {
    add('stream_c1_realistic', true, 1, n.c1);
    add('stream_c8_realistic', true, 8, n.c8);
    add('stream_c32_realistic', true, 32, n.c32);
  }
  return out;
}

export interface Timed {
  /** Whole response, ms. */
  readonly totalMs: number;
  /** First body byte, ms. */
  readonly firstByteMs: number;
  /** Empty when the answer is what the case expects. */
  readonly error: string;
}

const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

function check(c: Case, status: number, text: string): string {
  if (status !== 200) return `HTTP ${status} ${text.slice(0, 200)}`;
  if (c.stream && !text.trimEnd().endsWith('data: [DONE]')) return `stream without [DONE]: ${text.slice(-200)}`;
  if (!c.stream && !text.startsWith('{')) return `not JSON: ${text.slice(0, 200)}`;
  return '';
}

/** One POST of a case to `url`, timed as the client sees it. */
export async function timedPost(agent: Agent, url: string, c: Case, headers: Readonly<Record<string, string>>): Promise<Timed> {
  const start = performance.now();
  let firstByteMs = NaN;
  try {
    const res = await request(url, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json', ...headers },
      body: c.body,
      signal: AbortSignal.timeout(c.timeoutMs),
    });
    const parts: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      if (Number.isNaN(firstByteMs)) firstByteMs = performance.now() - start;
      size += (chunk as Buffer).length;
      if (size > MAX_RESPONSE_BYTES) throw new Error(`response larger than ${MAX_RESPONSE_BYTES} bytes`);
      parts.push(chunk as Buffer);
    }
    const totalMs = performance.now() - start;
    return {
      totalMs,
      firstByteMs: Number.isNaN(firstByteMs) ? totalMs : firstByteMs,
      error: check(c, res.statusCode, Buffer.concat(parts).toString('utf8')),
    };
  } catch (err) {
    const totalMs = performance.now() - start;
    return { totalMs, firstByteMs: totalMs, error: (err as Error).message };
  }
}
