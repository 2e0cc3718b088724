/**
 * The listeners' part of the configuration: the gRPC and metrics addresses, and which TLS keys go
 * together (the files themselves are read when the service starts, src/server-tls.ts).
 */
import { ConfigError } from './errors';
import { parseCipherSuites, parseTlsMinVersion, type TlsVersion } from './tls-profile';

/** A TCP listen address: `host` undefined = all interfaces (`:port`). */
export interface ListenAddress {
  readonly host: string | undefined;
  readonly port: number;
}

export interface TlsFiles {
  /** Empty for a self-signed certificate made at start-up. */
  readonly certFile: string;
  readonly keyFile: string;
  /** Set: client certificates are required and verified against it (mTLS). */
  readonly clientCaFile: string | undefined;
  /** No certificate configured and `secure_serving: true`: one is made at start-up. */
  readonly selfSigned?: boolean;
  /** The config key the files came from (`server.cert_path` or `server.tls_cert_file`), for messages. */
  readonly source?: string;
  /** `server.tls_min_version`; absent = TLS 1.2. */
  readonly minVersion?: TlsVersion;
  /** `server.tls_cipher_suites` as an OpenSSL list; absent = Node's defaults. */
  readonly ciphers?: string;
}

/** `host:port`, `:port` or `[v6]:port`; `null` for an address without a valid port. */
export function parseListenAddress(text: string): ListenAddress | null {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s]*)):(\d{1,5})$/.exec(text.trim());
  if (!m) return null;
  const port = Number(m[3]);
  if (port > 65535) return null;
  const host = m[1] ?? m[2] ?? '';
  return { host: host === '' ? undefined : host, port };
}

function parseMetricsAddr(text: string): ListenAddress | null {
  const t = text.trim();
  if (t === '' || t.toLowerCase() === 'off') return null;
  const addr = parseListenAddress(t);
  if (!addr) throw new ConfigError('server.metrics_addr', '"host:port", ":port", "" or "off"', text);
  return addr;
}

export interface TlsKeys {
  readonly cert: string | undefined;
  readonly key: string | undefined;
  readonly ca: string | undefined;
  readonly certPath: string | undefined;
  /** `server.secure_serving`, else its alias `server.secure_coordinator`; undefined = unset. */
  readonly secure: boolean | undefined;
  readonly minVersion: string | undefined;
  readonly ciphers: string | undefined;
}

/**
 * `server.metrics_addr` with upstream's `server.metrics_port` applied: the port replaces the
 * address's (whose host stays when the address was given explicitly, else all interfaces, as
 * upstream listens); `<= 0` disables, as upstream.
 */
export function metricsAddress(addrText: string, port: number | undefined, addrGiven: boolean): ListenAddress | null {
  const addr = parseMetricsAddr(addrText);
  if (port === undefined) return addr;
  if (port <= 0) return null;
  if (port > 65535) throw new ConfigError('server.metrics_port', 'a port from 1 to 65535 (or <= 0 to disable)', port);
  return { host: addrGiven ? addr?.host : undefined, port };
}

/** Files are checked when the service starts (src/server-tls.ts); here only which keys go together. */
export function parseTls(k: TlsKeys, warnings: string[]): TlsFiles | null {
  const set = (v: string | undefined): v is string => v !== undefined && v.trim() !== '';
  const profile = { minVersion: parseTlsMinVersion(k.minVersion), ciphers: parseCipherSuites(k.ciphers) };
  const anyCert = set(k.cert) || set(k.key) || set(k.certPath);
  if (k.secure === false) {
    // An upstream file that turns TLS off loads as it does there, certificate keys or not.
    if (anyCert || set(k.ca)) warnings.push('server.secure_serving is false: the TLS certificate keys are ignored');
    return null;
  }
  if (set(k.certPath)) {
    if (set(k.cert) || set(k.key)) throw new ConfigError('server.cert_path', 'either server.cert_path or server.tls_cert_file/server.tls_key_file, not both', k.certPath);
    const dir = k.certPath.replace(/\/+$/, '');
    return { certFile: `${dir}/tls.crt`, keyFile: `${dir}/tls.key`, clientCaFile: set(k.ca) ? k.ca : undefined, source: 'server.cert_path', ...profile };
  }
  if (!set(k.cert) && !set(k.key)) {
    if (k.secure === true) return { certFile: '', keyFile: '', clientCaFile: set(k.ca) ? k.ca : undefined, selfSigned: true, ...profile };
    if (set(k.ca)) throw new ConfigError('server.tls_client_ca_file', 'server.tls_cert_file and server.tls_key_file to be set too (mTLS needs a server certificate)', k.ca);
    return null;
  }
  if (!set(k.cert)) throw new ConfigError('server.tls_cert_file', 'a PEM certificate file (server.tls_key_file is set)', k.cert ?? '');
  if (!set(k.key)) throw new ConfigError('server.tls_key_file', 'a PEM private key file (server.tls_cert_file is set)', k.key ?? '');
  const files: TlsFiles = { certFile: k.cert, keyFile: k.key, clientCaFile: set(k.ca) ? k.ca : undefined };
  // Only non-default profile fields are added, so a plain file pair reads as before.
  return {
    ...files,
    ...(profile.minVersion !== 'TLSv1.2' ? { minVersion: profile.minVersion } : {}),
    ...(profile.ciphers !== undefined ? { ciphers: profile.ciphers } : {}),
  };
}
