/**
 * Upstream's TLS profile settings (reference §12.7) read as Node's TLS options: Go's
 * `tls_min_version` names and Go's cipher-suite names (as Kubernetes' cliflag accepts them),
 * translated to OpenSSL's. Unknown names stop start-up with upstream's messages.
 */
import { ConfigError } from './errors';

export type TlsVersion = 'TLSv1' | 'TLSv1.1' | 'TLSv1.2' | 'TLSv1.3';

const VERSIONS: Readonly<Record<string, TlsVersion>> = {
  VersionTLS10: 'TLSv1',
  VersionTLS11: 'TLSv1.1',
  VersionTLS12: 'TLSv1.2',
  VersionTLS13: 'TLSv1.3',
};

/** Go name -> OpenSSL name. TLS 1.3 suites map to `null`: Go ignores them in CipherSuites, and so do we. */
const CIPHERS: Readonly<Record<string, string | null>> = {
  TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256: 'ECDHE-ECDSA-AES128-GCM-SHA256',
  TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256: 'ECDHE-RSA-AES128-GCM-SHA256',
  TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384: 'ECDHE-ECDSA-AES256-GCM-SHA384',
  TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384: 'ECDHE-RSA-AES256-GCM-SHA384',
  TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: 'ECDHE-ECDSA-CHACHA20-POLY1305',
  TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256: 'ECDHE-RSA-CHACHA20-POLY1305',
  // Go's legacy spellings, accepted by upstream.
  TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305: 'ECDHE-ECDSA-CHACHA20-POLY1305',
  TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305: 'ECDHE-RSA-CHACHA20-POLY1305',
  TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA: 'ECDHE-ECDSA-AES128-SHA',
  TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA: 'ECDHE-RSA-AES128-SHA',
  TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA: 'ECDHE-ECDSA-AES256-SHA',
  TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA: 'ECDHE-RSA-AES256-SHA',
  TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256: 'ECDHE-ECDSA-AES128-SHA256',
  TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256: 'ECDHE-RSA-AES128-SHA256',
  TLS_RSA_WITH_AES_128_GCM_SHA256: 'AES128-GCM-SHA256',
  TLS_RSA_WITH_AES_256_GCM_SHA384: 'AES256-GCM-SHA384',
  TLS_RSA_WITH_AES_128_CBC_SHA: 'AES128-SHA',
  TLS_RSA_WITH_AES_256_CBC_SHA: 'AES256-SHA',
  TLS_RSA_WITH_AES_128_CBC_SHA256: 'AES128-SHA256',
  TLS_AES_128_GCM_SHA256: null,
  TLS_AES_256_GCM_SHA384: null,
  TLS_CHACHA20_POLY1305_SHA256: null,
};

/** `""` = TLS 1.2, as upstream. */
export function parseTlsMinVersion(v: string | undefined): TlsVersion {
  const t = (v ?? '').trim();
  if (t === '') return 'TLSv1.2';
  const version = VERSIONS[t];
  if (!version) throw new ConfigError('server.tls_min_version', `one of ${Object.keys(VERSIONS).join(', ')} (invalid tls_min_version "${t}")`, t);
  return version;
}

/**
 * A comma-separated list of Go names -> an OpenSSL cipher list for TLS <= 1.2, or `undefined`
 * (Node's defaults) when empty or only TLS 1.3 names were given. 3DES and RC4, which Go still
 * knows as insecure suites, are refused: the OpenSSL Node ships will not negotiate them.
 */
export function parseCipherSuites(v: string | undefined): string | undefined {
  const names = (v ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '');
  const out: string[] = [];
  for (const name of names) {
    if (!(name in CIPHERS)) throw new ConfigError('server.tls_cipher_suites', 'Go cipher-suite names', `Cipher suite ${name} not supported or doesn't exist`);
    const openssl = CIPHERS[name];
    if (openssl && !out.includes(openssl)) out.push(openssl);
  }
  return out.length > 0 ? out.join(':') : undefined;
}
