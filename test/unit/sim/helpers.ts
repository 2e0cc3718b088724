/** Small HTTP helpers for the simulator tests (loopback only). */

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
}

/** Reads an SSE body read by read; returns the reads (as text) and the `data:` payloads. */
export async function readSse(res: Response): Promise<{ reads: string[]; data: string[] }> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  const reads: string[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    reads.push(decoder.decode(value, { stream: true }));
  }
  const data = reads
    .join('')
    .split('\n\n')
    .filter((frame) => frame.length > 0)
    .map((frame) => {
      expect(frame.startsWith('data: ')).toBe(true);
      return frame.slice('data: '.length);
    });
  return { reads, data };
}

/**
 * The parsed JSON body. Loosely typed on purpose: the tests probe arbitrary answer shapes and the
 * assertions themselves check them.
 */

export async function readJson(res: Response): Promise<any> {
  return res.json();
}
