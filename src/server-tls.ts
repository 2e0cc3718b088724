/**
 * Server credentials of the gRPC listener: plaintext h2c, TLS, or mTLS when a client CA is given.
 *
 * The files are read and checked here, at start-up, so that a wrong path, a file that is not PEM or
 * a key that does not match the certificate stops the service with the config key in the message,
 * instead of failing every handshake later.
 */
import * as grpc from '@grpc/grpc-js';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
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
  if (data.length === 0 || data.length > MAX_PEM_BYTES) throw new ConfigError(key, `a PEM file of 1 byte to 1 MiB at ${path}`, `${data.length} bytes`);
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
}

/** Builds the listener's credentials; `null` config means plaintext. Throws {@link ConfigError}. */
export function serverCredentials(tls: TlsFiles | null): LoadedTls {
  if (!tls) return { credentials: grpc.ServerCredentials.createInsecure(), mutual: false };
  const certPem = readPem('server.tls_cert_file', tls.certFile);
  const keyPem = readPem('server.tls_key_file', tls.keyFile);
  const cert = parseCertificate('server.tls_cert_file', tls.certFile, certPem);
  let privateKey;
  try {
    privateKey = createPrivateKey(keyPem);
  } catch (err) {
    throw new ConfigError('server.tls_key_file', `an unencrypted PEM private key in ${tls.keyFile}`, (err as Error).message);
  }
  if (!cert.checkPrivateKey(privateKey)) {
    throw new ConfigError('server.tls_key_file', `the private key of the certificate in ${tls.certFile}`, 'a key that does not match');
  }
  let caPem: Buffer | null = null;
  if (tls.clientCaFile !== undefined) {
    caPem = readPem('server.tls_client_ca_file', tls.clientCaFile);
    parseCertificate('server.tls_client_ca_file', tls.clientCaFile, caPem);
  }
  // With a CA, checkClientCertificate = true: the handshake fails without a valid client certificate.
  const credentials = grpc.ServerCredentials.createSsl(caPem, [{ private_key: keyPem, cert_chain: certPem }], caPem !== null);
  return { credentials, mutual: caPem !== null };
}
