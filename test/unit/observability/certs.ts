/**
 * Test PKI made with the system `openssl` at test time: a CA, a server certificate for 127.0.0.1 /
 * localhost, a client certificate, and a client certificate from a CA the server does not trust.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestPki {
  readonly dir: string;
  readonly caCert: string;
  readonly serverCert: string;
  readonly serverKey: string;
  readonly clientCert: string;
  readonly clientKey: string;
  /** Signed by another CA: the server must refuse it. */
  readonly strangerCert: string;
  readonly strangerKey: string;
  read(path: string): Buffer;
  remove(): void;
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'], timeout: 30_000 });
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function makeCa(dir: string, name: string): void {
  openssl(dir, [
    'req',
    '-x509',
    ...EC,
    '-keyout',
    `${name}.key`,
    '-out',
    `${name}.crt`,
    '-days',
    '2',
    '-subj',
    `/CN=${name}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
}

function makeLeaf(dir: string, name: string, ca: string, ext: string): void {
  writeFileSync(join(dir, `${name}.ext`), ext);
  openssl(dir, ['req', ...EC, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    `${name}.csr`,
    '-CA',
    `${ca}.crt`,
    '-CAkey',
    `${ca}.key`,
    '-CAcreateserial',
    '-out',
    `${name}.crt`,
    '-days',
    '2',
    '-extfile',
    `${name}.ext`,
  ]);
}

export function makeTestPki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'epd-pki-'));
  makeCa(dir, 'ca');
  makeCa(dir, 'other-ca');
  makeLeaf(dir, 'server', 'ca', 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  makeLeaf(dir, 'client', 'ca', 'extendedKeyUsage=clientAuth\n');
  makeLeaf(dir, 'stranger', 'other-ca', 'extendedKeyUsage=clientAuth\n');
  const p = (f: string) => join(dir, f);
  return {
    dir,
    caCert: p('ca.crt'),
    serverCert: p('server.crt'),
    serverKey: p('server.key'),
    clientCert: p('client.crt'),
    clientKey: p('client.key'),
    strangerCert: p('stranger.crt'),
    strangerKey: p('stranger.key'),
    read: (path) => readFileSync(path),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
