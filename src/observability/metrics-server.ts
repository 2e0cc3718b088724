/**
 * The Prometheus scrape endpoint: `GET /metrics` on its own HTTP listener (`server.metrics_addr`),
 * kept off the gRPC port so a scraper never shares Envoy's connection.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { ListenAddress } from '../config/config';

export interface MetricsSource {
  exposition(): Promise<{ contentType: string; body: string }>;
}

export interface MetricsServer {
  /** The bound port (useful with port 0). */
  readonly port: number;
  close(): Promise<void>;
}

/** Scrapes are small requests: anything slow or large is not a scraper. */
const REQUEST_TIMEOUT_MS = 5000;
const MAX_HEADER_BYTES = 16 * 1024;

export async function startMetricsServer(addr: ListenAddress, source: MetricsSource, log: Logger): Promise<MetricsServer> {
  const server: Server = createServer(
    { maxHeaderSize: MAX_HEADER_BYTES, requestTimeout: REQUEST_TIMEOUT_MS, headersTimeout: REQUEST_TIMEOUT_MS },
    (req, res) => {
      const path = (req.url ?? '').split('?')[0];
      if (path !== '/metrics') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: the only path is /metrics\n');
        return;
      }
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
        return;
      }
      source.exposition().then(
        ({ contentType, body }) => {
          res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' });
          res.end(req.method === 'HEAD' ? undefined : body);
        },
        (err: unknown) => {
          log.error({ err: (err as Error).message }, 'metrics: collecting failed');
          res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics collection failed\n');
        },
      );
    },
  );
  server.keepAliveTimeout = REQUEST_TIMEOUT_MS;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: addr.host, port: addr.port }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', (err) => log.error({ err: err.message }, 'metrics listener error'));
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
