/** Reading a request body with a hard size limit. */

import type { IncomingMessage } from 'node:http';

export type BodyResult =
  | { readonly kind: 'complete'; readonly body: Buffer }
  | { readonly kind: 'too-large' }
  /** The client went away before the body was complete; `body` is what had arrived. */
  | { readonly kind: 'aborted'; readonly body: Buffer };

export function readBody(req: IncomingMessage, maxBytes: number): Promise<BodyResult> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    req.resume();
    return Promise.resolve({ kind: 'too-large' });
  }
  return new Promise<BodyResult>((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const settle = (result: BodyResult): void => {
      if (settled) return;
      settled = true;
      req.off('data', onData);
      resolve(result);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > maxBytes) {
        chunks.length = 0;
        // Keep draining so the socket is not stuck on backpressure while the 413 goes out.
        req.resume();
        settle({ kind: 'too-large' });
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => settle({ kind: 'complete', body: Buffer.concat(chunks, size) }));
    const onGone = (): void => {
      if (!req.complete) settle({ kind: 'aborted', body: Buffer.concat(chunks) });
    };
    req.once('error', onGone);
    req.once('close', onGone);
  });
}

/** The parsed body, or undefined when empty or not JSON. */
export function parseJson(body: Buffer): unknown {
  if (body.length === 0) return undefined;
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}
