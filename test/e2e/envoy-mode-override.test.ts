/**
 * The Envoy fact docs/force-stream.md rests on, checked against the real Envoy 1.40: with
 * `allow_mode_override: true`, a `mode_override` asking for the response headers is honoured under
 * the BUFFERED request body mode and ignored under FULL_DUPLEX_STREAMED. So per-request response
 * processing cannot be switched on in our default mode, and force-stream answers locally instead.
 *
 * The processor here is a minimal one of the test's own (the service never sends mode_override);
 * Envoy is the real one, with our bootstrap plus `allow_mode_override: true`.
 */
import * as grpc from '@grpc/grpc-js';
import { mkdtempSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { extProcServiceDefinition } from '../../src/extproc/proto';
import { TestClient } from '../../launch/client';
import { startEnvoy, type EnvoyHandle } from '../../launch/envoy';

type Msg = Record<string, unknown> & { request?: string };

describe.each([
  ['buffered', { request_body_mode: 'BUFFERED', request_trailer_mode: 'SKIP' }, 1],
  ['full_duplex', { request_body_mode: 'FULL_DUPLEX_STREAMED', request_trailer_mode: 'SEND' }, 0],
] as const)('Envoy 1.40 mode_override under %s request bodies', (bodyMode, requestModes, expectedResponseHeaders) => {
  let envoy: EnvoyHandle;
  let processor: grpc.Server;
  let worker: Server;
  let client: TestClient;
  const seen: string[] = [];

  beforeAll(async () => {
    worker = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
    });
    await new Promise<void>((r) => worker.listen(0, '127.0.0.1', r));
    processor = new grpc.Server();
    processor.addService(extProcServiceDefinition(), {
      Process: (call: grpc.ServerDuplexStream<Msg, unknown>) => {
        call.on('data', (m: Msg) => {
          const kind = m.request ?? 'none';
          seen.push(kind);
          switch (kind) {
            case 'request_headers':
              // Body modes are copied verbatim from an override: keep the request's own.
              call.write({
                request_headers: {},
                mode_override: { ...requestModes, response_header_mode: 'SEND', response_body_mode: 'NONE', response_trailer_mode: 'SKIP' },
              });
              return;
            case 'request_body': {
              const b = m['request_body'] as { body: Buffer; end_of_stream: boolean };
              call.write(
                bodyMode === 'full_duplex'
                  ? {
                      request_body: {
                        response: { body_mutation: { streamed_response: { body: b.body, end_of_stream: b.end_of_stream } } },
                      },
                    }
                  : { request_body: {} },
              );
              return;
            }
            case 'request_trailers':
              call.write({ request_trailers: {} });
              return;
            case 'response_headers':
              call.write({ response_headers: {} });
              return;
            default:
              call.write({ [kind]: {} });
          }
        });
        call.on('end', () => call.end());
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      processor.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    const workerAddr = `127.0.0.1:${(worker.address() as AddressInfo).port}`;
    envoy = await startEnvoy({
      dir: mkdtempSync(join(tmpdir(), 'envoy-mode-override-')),
      bootstrap: {
        bodyMode,
        extProcAddress: `127.0.0.1:${port}`,
        encodeAddress: workerAddr,
        prefillAddress: workerAddr,
        decodeAddress: workerAddr,
      },
      editConfig: (yaml) => {
        const out = yaml.replace(/( +)message_timeout: 600s\n/, (line, indent: string) => `${line}${indent}allow_mode_override: true\n`);
        if (out === yaml) throw new Error('bootstrap changed: no message_timeout line to anchor allow_mode_override');
        return out;
      },
    });
    client = new TestClient(envoy.publicUrl);
  }, 120_000);
  afterAll(async () => {
    await client?.close();
    await envoy?.stop();
    processor?.forceShutdown();
    await new Promise<void>((r) => (worker ? worker.close(() => r()) : r()));
  });

  it(`response_headers messages after an override on the request-headers reply: ${expectedResponseHeaders}`, async () => {
    const res = await client.post('/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ ok: true });
    expect(seen.filter((k) => k === 'request_headers')).toHaveLength(1);
    expect(seen.filter((k) => k === 'response_headers')).toHaveLength(expectedResponseHeaders);
  });
});
