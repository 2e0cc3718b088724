/**
 * TLS parity with upstream (issue #15 item 5, reference §12.7), with real TLS clients on loopback:
 * `server.cert_path` reloaded on change without dropping open streams, `tls_min_version`,
 * `tls_cipher_suites`, the self-signed default of `secure_serving: true`, the upstream aliases.
 */
import * as grpc from '@grpc/grpc-js';
import { copyFileSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type PeerCertificate } from 'node:tls';
import { parseConfig, type AppConfig } from '../../../src/config/config';
import { ConfigError } from '../../../src/config/errors';
import { silentLogger } from '../../../src/observability/logger';
import { startService, type RunningService } from '../../../src/service';
import { makeTestPki, type TestPki } from './certs';
import { HealthProbe } from './health-client';

const EXT_PROC = 'envoy.service.ext_proc.v3.ExternalProcessor';

function config(server: Record<string, unknown>): AppConfig {
  return parseConfig(
    {
      server: { listen_addr: '127.0.0.1:0', metrics_addr: '', shutdown_timeout: '2s', ...server },
      gateway: { address: 'http://127.0.0.1:9', timeout: '5s' },
      pipeline: { steps: [{ type: 'prefill' }, { type: 'decode' }] },
    },
    {},
  );
}

/** One raw TLS handshake: the certificate the server presented and what was negotiated. */
function handshake(
  port: number,
  opts: { maxVersion?: 'TLSv1.2' | 'TLSv1.3' } = {},
): Promise<{ cert: PeerCertificate; protocol: string | null; cipher: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(
      { host: '127.0.0.1', port, servername: 'localhost', rejectUnauthorized: false, ALPNProtocols: ['h2'], ...opts },
      () => {
        const out = { cert: socket.getPeerCertificate(), protocol: socket.getProtocol(), cipher: socket.getCipher().name };
        socket.destroy();
        resolve(out);
      },
    );
    socket.once('error', reject);
  });
}

async function eventually(cond: () => Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('server.cert_path: reload without dropping streams', () => {
  let a: TestPki;
  let b: TestPki;
  let dir: string;
  let service: RunningService | undefined;
  beforeAll(() => {
    a = makeTestPki();
    b = makeTestPki();
    dir = mkdtempSync(join(tmpdir(), 'epd-certdir-'));
  });
  afterAll(async () => {
    await service?.close(0);
    a.remove();
    b.remove();
    rmSync(dir, { recursive: true, force: true });
  });

  /** As a Secret volume update does it: new files written beside, then renamed into place. */
  const install = (pki: TestPki) => {
    copyFileSync(pki.serverCert, join(dir, 'tls.crt.new'));
    copyFileSync(pki.serverKey, join(dir, 'tls.key.new'));
    renameSync(join(dir, 'tls.key.new'), join(dir, 'tls.key'));
    renameSync(join(dir, 'tls.crt.new'), join(dir, 'tls.crt'));
  };

  it('new handshakes get the new certificate; a stream opened before keeps going on its connection', async () => {
    install(a);
    service = await startService(config({ cert_path: dir }), { log: silentLogger() });
    const port = service.grpcPort;
    const before = await handshake(port);
    const serialA = before.cert.serialNumber;

    const bothCas = Buffer.concat([a.read(a.caCert), b.read(b.caCert)]);
    const early = new HealthProbe(`127.0.0.1:${port}`, grpc.credentials.createSsl(bothCas));
    expect(await early.check(EXT_PROC)).toBe('SERVING');
    const watch = early.watch(EXT_PROC);
    await eventually(async () => watch.statuses.length > 0, 'the first Watch status');

    install(b);
    await eventually(async () => (await handshake(port)).cert.serialNumber !== serialA, 'a handshake with the new certificate');

    // The old connection and its open Watch stream survived the reload.
    expect(await early.check(EXT_PROC)).toBe('SERVING');
    const late = new HealthProbe(`127.0.0.1:${port}`, grpc.credentials.createSsl(b.read(b.caCert)));
    expect(await late.check(EXT_PROC)).toBe('SERVING');
    // Draining pushes NOT_SERVING down the stream opened before the reload: it was never dropped.
    const closing = service.close(2000);
    await eventually(async () => watch.statuses.includes('NOT_SERVING'), 'NOT_SERVING on the early Watch');
    await closing;
    service = undefined;
    early.close();
    late.close();
  });

  it('a half-written or mismatched pair is not taken: the server keeps the old one', async () => {
    install(a);
    service = await startService(config({ cert_path: dir }), { log: silentLogger() });
    const serialA = (await handshake(service.grpcPort)).cert.serialNumber;
    copyFileSync(b.serverCert, join(dir, 'tls.crt')); // key still A's
    await new Promise((r) => setTimeout(r, 500));
    expect((await handshake(service.grpcPort)).cert.serialNumber).toBe(serialA);
    await service.close(0);
    service = undefined;
  });
});

describe('TLS profile and defaults', () => {
  let pki: TestPki;
  beforeAll(() => {
    pki = makeTestPki();
  });
  afterAll(() => pki.remove());

  const withService = async (server: Record<string, unknown>, run: (port: number) => Promise<void>) => {
    const service = await startService(config(server), { log: silentLogger() });
    try {
      await run(service.grpcPort);
    } finally {
      await service.close(0);
    }
  };

  it('tls_min_version VersionTLS13 refuses a TLS 1.2 client and serves a TLS 1.3 one', async () => {
    await withService({ tls_cert_file: pki.serverCert, tls_key_file: pki.serverKey, tls_min_version: 'VersionTLS13' }, async (port) => {
      await expect(handshake(port, { maxVersion: 'TLSv1.2' })).rejects.toThrow();
      expect((await handshake(port)).protocol).toBe('TLSv1.3');
    });
  });

  it('the default floor is TLS 1.2: a TLS 1.2 client is served', async () => {
    await withService({ tls_cert_file: pki.serverCert, tls_key_file: pki.serverKey }, async (port) => {
      expect((await handshake(port, { maxVersion: 'TLSv1.2' })).protocol).toBe('TLSv1.2');
    });
  });

  it('tls_cipher_suites by Go name restricts TLS 1.2 to that suite', async () => {
    await withService(
      { tls_cert_file: pki.serverCert, tls_key_file: pki.serverKey, tls_cipher_suites: ['TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384'] },
      async (port) => {
        expect((await handshake(port, { maxVersion: 'TLSv1.2' })).cipher).toBe('ECDHE-ECDSA-AES256-GCM-SHA384');
      },
    );
  });

  it('secure_serving true without a certificate serves a self-signed O=llm-d one, no SANs', async () => {
    await withService({ secure_serving: true }, async (port) => {
      const { cert } = await handshake(port);
      expect(cert.subject).toMatchObject({ O: 'llm-d' });
      expect(cert.issuer).toMatchObject({ O: 'llm-d' });
      expect(cert.subjectaltname).toBeUndefined();
      // A gRPC client that trusts exactly this certificate and skips the name check gets through.
      const pem = `-----BEGIN CERTIFICATE-----\n${cert.raw.toString('base64')}\n-----END CERTIFICATE-----\n`;
      const probe = new HealthProbe(
        `127.0.0.1:${port}`,
        grpc.credentials.createSsl(Buffer.from(pem), null, null, { checkServerIdentity: () => undefined }),
      );
      try {
        expect(await probe.check(EXT_PROC)).toBe('SERVING');
      } finally {
        probe.close();
      }
    });
  });

  it("upstream's old key secure_coordinator is an alias; unset stays plaintext (our default)", async () => {
    expect(config({ secure_coordinator: true }).server.tls).toMatchObject({ selfSigned: true });
    expect(config({}).server.tls).toBeNull();
    expect(parseConfig({ server: { secure_serving: false, cert_path: '/x' } }, {}).warnings.join()).toContain(
      'TLS certificate keys are ignored',
    );
    expect(parseConfig({ server: { cert_path: '/x' } }, { COORDINATOR_SERVER_SECURE_SERVING: 'false' }).server.tls).toBeNull();
  });

  it.each([
    [{ tls_min_version: 'VersionTLS99' }, 'invalid tls_min_version "VersionTLS99"'],
    [{ tls_cipher_suites: 'TLS_NOT_A_CIPHER' }, "Cipher suite TLS_NOT_A_CIPHER not supported or doesn't exist"],
    [{ cert_path: '/a', tls_cert_file: '/c', tls_key_file: '/k' }, 'either server.cert_path or server.tls_cert_file'],
  ])('%j stops start-up: %s', (server, text) => {
    expect(() => config(server)).toThrow(ConfigError);
    expect(() => config(server)).toThrow(text);
  });
});
