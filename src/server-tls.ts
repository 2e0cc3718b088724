/**
 * Server credentials of the gRPC listener: plaintext h2c, TLS, or mTLS when a client CA is given;
 * a self-signed certificate when TLS is asked for without one; the key pair reloaded when its
 * files change (reference §12.7).
 *
 * The files are read and checked here, at start-up, so that a wrong path, a file that is not PEM or
 * a key that does not match the certificate stops the service with the config key in the message,
 * instead of failing every handshake later.
 */
import * as grpc from '@grpc/grpc-js';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync, watch, type FSWatcher } from 'node:fs';
import type { SecureServerOptions } from 'node:http2';
import { dirname } from 'node:path';
import type { SecureContextOptions } from 'node:tls';
import type { Logger } from 'pino';
import { createSelfSignedCertificate } from './self-signed-cert';
import type { TlsFiles } from './config/config';
import { ConfigError } from './config/errors';

/** No legitimate certificate, key or CA bundle is this large. */
const MAX_PEM_BYTES = 1024 * 1024;

function readPem(key: string, path: string): Buffer {
  let data: Buffer;
  try {
    data = readFileSync(path);
  } catch (err) {
    throw new ConfigError(key, `a readable PEM file at ${path}`, (err as NodeJS.ErrnoException).code ?? (err as Error).message);
  }
  if (data.length === 0 || data.length > MAX_PEM_BYTES)
    throw new ConfigError(key, `a PEM file of 1 byte to 1 MiB at ${path}`, `${data.length} bytes`);
  return data;
}

function parseCertificate(key: string, path: string, pem: Buffer): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch (err) {
    throw new ConfigError(key, `a PEM certificate in ${path}`, (err as Error).message);
  }
}

export interface LoadedTls {
  readonly credentials: grpc.ServerCredentials;
  /** True when clients must present a certificate signed by the configured CA. */
  readonly mutual: boolean;
  /** `off`, `files` (reloaded on change) or `self-signed`. */
  readonly mode: 'off' | 'files' | 'self-signed';
  /** Stops watching the certificate files. */
  close(): void;
}

/** The key pair as read and checked; throws {@link ConfigError} naming the key. */
function readKeyPair(tls: TlsFiles): { certPem: Buffer; keyPem: Buffer } {
  const certKey = tls.source === 'server.cert_path' ? 'server.cert_path' : 'server.tls_cert_file';
  const keyKey = tls.source === 'server.cert_path' ? 'server.cert_path' : 'server.tls_key_file';
  const certPem = readPem(certKey, tls.certFile);
  const keyPem = readPem(keyKey, tls.keyFile);
  const cert = parseCertificate(certKey, tls.certFile, certPem);
  let privateKey;
  try {
    privateKey = createPrivateKey(keyPem);
  } catch (err) {
    throw new ConfigError(keyKey, `an unencrypted PEM private key in ${tls.keyFile}`, (err as Error).message);
  }
  if (!cert.checkPrivateKey(privateKey)) {
    throw new ConfigError(keyKey, `the private key of the certificate in ${tls.certFile}`, 'a key that does not match');
  }
  return { certPem, keyPem };
}

/**
 * Server credentials whose key pair can be replaced while the server runs. grpc-js watches its
 * credentials and calls `setSecureContext` on the live HTTP/2 server: new handshakes get the new
 * pair, while connections already up (and every stream on them) keep the context they started with.
 */
class ReloadableServerCredentials extends grpc.ServerCredentials {
  constructor(
    constructorOptions: SecureServerOptions,
    private readonly profile: SecureContextOptions,
    pair: { certPem: Buffer; keyPem: Buffer },
  ) {
    super(constructorOptions, { ...profile, cert: pair.certPem, key: pair.keyPem });
  }

  reload(pair: { certPem: Buffer; keyPem: Buffer }): void {
    this.updateSecureContextOptions({ ...this.profile, cert: pair.certPem, key: pair.keyPem });
  }

  _equals(other: grpc.ServerCredentials): boolean {
    return this === other;
  }
}

/** How often the files are re-read even without a change event (a missed inotify event, NFS). */
const DEFAULT_POLL_MS = 30_000;
/** Events come in bursts (a Secret update swaps a symlink and touches several names). */
const SETTLE_MS = 100;

export interface ServerTlsOptions {
  readonly log?: Logger;
  /** Re-read interval without change events, ms; default 30 s. */
  readonly pollMs?: number;
}

/** Builds the listener's credentials; `null` config means plaintext. Throws {@link ConfigError}. */
export function serverCredentials(tls: TlsFiles | null, opts: ServerTlsOptions = {}): LoadedTls {
  if (!tls) return { credentials: grpc.ServerCredentials.createInsecure(), mutual: false, mode: 'off', close: () => undefined };
  let pair: { certPem: Buffer; keyPem: Buffer };
  if (tls.selfSigned) {
    opts.log?.info({ subject: 'O=llm-d' }, 'creating self-signed TLS certificate');
    pair = createSelfSignedCertificate();
  } else {
    pair = readKeyPair(tls);
  }
  let caPem: Buffer | null = null;
  if (tls.clientCaFile !== undefined) {
    caPem = readPem('server.tls_client_ca_file', tls.clientCaFile);
    parseCertificate('server.tls_client_ca_file', tls.clientCaFile, caPem);
  }
  const profile: SecureContextOptions = { minVersion: tls.minVersion ?? 'TLSv1.2' };
  if (tls.ciphers) profile.ciphers = tls.ciphers;
  if (caPem) profile.ca = caPem;
  // With a CA the handshake fails without a valid client certificate (mTLS).
  const mutual = caPem !== null;
  const credentials = new ReloadableServerCredentials({ requestCert: mutual, rejectUnauthorized: mutual }, profile, pair);
  if (tls.selfSigned) return { credentials, mutual, mode: 'self-signed', close: () => undefined };
  const watcher = watchKeyPair(tls, pair, (next) => credentials.reload(next), opts);
  return { credentials, mutual, mode: 'files', close: () => watcher.close() };
}

/**
 * Watches the directories of the certificate and key and reloads the pair when its bytes change.
 * A pair that fails to load (half-written, mismatched) is logged and the old one kept; the next
 * change or poll tries again.
 */
function watchKeyPair(
  tls: TlsFiles,
  initial: { certPem: Buffer; keyPem: Buffer },
  apply: (pair: { certPem: Buffer; keyPem: Buffer }) => void,
  opts: ServerTlsOptions,
): { close(): void } {
  let current = initial;
  let timer: NodeJS.Timeout | undefined;
  const check = (): void => {
    timer = undefined;
    let next;
    try {
      next = readKeyPair(tls);
    } catch (err) {
      opts.log?.warn({ err: (err as Error).message }, 'TLS certificate reload failed; keeping the current one');
      return;
    }
    if (next.certPem.equals(current.certPem) && next.keyPem.equals(current.keyPem)) return;
    current = next;
    apply(next);
    opts.log?.info({ cert: tls.certFile }, 'TLS certificate reloaded');
  };
  const soon = (): void => {
    if (!timer) timer = setTimeout(check, SETTLE_MS).unref();
  };
  const watchers: FSWatcher[] = [];
  for (const dir of new Set([dirname(tls.certFile), dirname(tls.keyFile)])) {
    try {
      const w = watch(dir, { persistent: false }, soon);
      w.on('error', () => undefined);
      watchers.push(w);
    } catch (err) {
      opts.log?.warn({ dir, err: (err as Error).message }, 'cannot watch the TLS certificate directory; polling only');
    }
  }
  const poll = setInterval(check, opts.pollMs ?? DEFAULT_POLL_MS).unref();
  return {
    close: () => {
      clearInterval(poll);
      if (timer) clearTimeout(timer);
      for (const w of watchers) w.close();
    },
  };
}
