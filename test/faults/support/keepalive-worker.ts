/**
 * A decode worker that closes idle connections at its keep-alive edge, as vLLM's uvicorn
 * (`--timeout-keep-alive`, 5 s) and Node's http.Server do: Node's own keep-alive timer with no extra
 * buffer (`keepAliveTimeoutBuffer` 0), so that a request arriving as the timer fires meets a closing
 * connection. Answers every request with a small chat completion after reading its body.
 */
import { createServer, type Server } from 'node:http';

export interface KeepaliveWorker {
  readonly address: string;
  /** Requests whose body was read and answered. */
  readonly answered: number;
  /** The largest request body seen, bytes. */
  readonly largestBody: number;
  close(): Promise<void>;
}

const ANSWER = JSON.stringify({
  id: 'chatcmpl-keepalive',
  object: 'chat.completion',
  model: 'sim-model',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
});

export async function startKeepaliveWorker(keepAliveMs: number): Promise<KeepaliveWorker> {
  let answered = 0;
  let largestBody = 0;
  const server: Server = createServer((req, res) => {
    let size = 0;
    req.on('data', (c: Buffer) => (size += c.length));
    req.on('end', () => {
      largestBody = Math.max(largestBody, size);
      answered++;
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(ANSWER) });
      res.end(ANSWER);
    });
  });
  server.keepAliveTimeout = keepAliveMs;
  // Node >= 24 keeps sockets 1 s past keepAliveTimeout to soften this very race; the workers above do not.
  (server as Server & { keepAliveTimeoutBuffer?: number }).keepAliveTimeoutBuffer = 0;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    address: `127.0.0.1:${port}`,
    get answered() {
      return answered;
    },
    get largestBody() {
      return largestBody;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
