/** The operations keys of the one config schema: metrics address, TLS files, tracing. */
import { parseConfig } from '../../../src/config/config';
import { ConfigError } from '../../../src/config/errors';
import { KEYS } from '../../../src/config/schema';

describe('operations config keys', () => {
  test('defaults: metrics on :9464 (all interfaces), plaintext gRPC, tracing off', () => {
    const c = parseConfig({}, {});
    expect(c.server.metricsAddr).toEqual({ host: undefined, port: 9464 });
    expect(c.server.tls).toBeNull();
    expect(c.tracing).toBe(false);
    for (const key of ['server.metrics_addr', 'server.tls_cert_file', 'server.tls_key_file', 'server.tls_client_ca_file', 'tracing']) {
      expect(KEYS.find((k) => k.key === key)?.doc).toBeTruthy();
    }
  });

  test.each([
    ['', null],
    ['off', null],
    ['OFF', null],
    [':9090', { host: undefined, port: 9090 }],
    ['127.0.0.1:0', { host: '127.0.0.1', port: 0 }],
    ['[::1]:9464', { host: '::1', port: 9464 }],
    ['metrics.local:9464', { host: 'metrics.local', port: 9464 }],
  ])('metrics_addr %j', (text, expected) => {
    expect(parseConfig({ server: { metrics_addr: text } }, {}).server.metricsAddr).toEqual(expected);
  });

  test.each(['9464', ':99999', 'host:', 'a b:1', 9464])('metrics_addr %j is refused, naming the key', (bad) => {
    expect(() => parseConfig({ server: { metrics_addr: bad } }, {})).toThrow(ConfigError);
    expect(() => parseConfig({ server: { metrics_addr: bad } }, {})).toThrow(/^server\.metrics_addr: expected/);
  });

  test('COORDINATOR_SERVER_METRICS_ADDR and COORDINATOR_TRACING override the file', () => {
    const c = parseConfig(
      { tracing: false, server: { metrics_addr: ':1' } },
      { COORDINATOR_TRACING: 'true', COORDINATOR_SERVER_METRICS_ADDR: 'off' },
    );
    expect(c.tracing).toBe(true);
    expect(c.server.metricsAddr).toBeNull();
  });

  test('tracing is a top-level bool: no unknown-key warning; a non-bool names the key', () => {
    expect(parseConfig({ tracing: true }, {}).warnings).toEqual([]);
    expect(() => parseConfig({ tracing: 'yes' }, {})).toThrow('tracing: expected true or false');
  });

  test('TLS: cert and key together, client CA optional (mTLS)', () => {
    expect(parseConfig({ server: { tls_cert_file: '/c', tls_key_file: '/k' } }, {}).server.tls).toEqual({
      certFile: '/c',
      keyFile: '/k',
      clientCaFile: undefined,
    });
    expect(parseConfig({ server: { tls_cert_file: '/c', tls_key_file: '/k', tls_client_ca_file: '/ca' } }, {}).server.tls).toEqual({
      certFile: '/c',
      keyFile: '/k',
      clientCaFile: '/ca',
    });
    expect(parseConfig({ server: { tls_cert_file: '', tls_key_file: '' } }, {}).server.tls).toBeNull();
  });

  test.each([
    [{ tls_cert_file: '/c' }, /^server\.tls_key_file: expected a PEM private key file/],
    [{ tls_key_file: '/k' }, /^server\.tls_cert_file: expected a PEM certificate file/],
    [{ tls_client_ca_file: '/ca' }, /^server\.tls_client_ca_file: expected server\.tls_cert_file and server\.tls_key_file/],
  ])('TLS keys that do not go together are refused: %j', (server, message) => {
    expect(() => parseConfig({ server }, {})).toThrow(message);
  });
});
