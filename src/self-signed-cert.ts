/**
 * A self-signed certificate made at start-up, when TLS is on and no certificate is given (as
 * upstream: subject `O=llm-d`, no SANs, so no client can verify it; it encrypts, it does not
 * authenticate). ECDSA P-256, valid for a year, built with node:crypto alone: a DER encoder for
 * the handful of ASN.1 types an X.509 certificate needs, so no openssl binary is required.
 */
import { generateKeyPairSync, randomBytes, sign } from 'node:crypto';

function len(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v >>= 8) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), len(body.length), body]);
}

const seq = (...c: Buffer[]) => tlv(0x30, ...c);
/** ecdsa-with-SHA256 (1.2.840.10045.4.3.2), no parameters. */
const ECDSA_SHA256 = seq(Buffer.from([0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]));
/** organizationName (2.5.4.10). */
const OID_O = Buffer.from([0x06, 0x03, 0x55, 0x04, 0x0a]);

function name(org: string): Buffer {
  return seq(tlv(0x31, seq(OID_O, tlv(0x0c, Buffer.from(org, 'utf8')))));
}

/** UTCTime before 2050, GeneralizedTime from then on (RFC 5280 §4.1.2.5). */
function time(d: Date): Buffer {
  const iso = d.toISOString().replace(/[-:T]/g, '').slice(0, 14) + 'Z';
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(iso.slice(2), 'ascii')) : tlv(0x18, Buffer.from(iso, 'ascii'));
}

function pem(label: string, der: Buffer): string {
  const b64 = der
    .toString('base64')
    .replace(/(.{64})/g, '$1\n')
    .replace(/\n$/, '');
  return `-----BEGIN ${label}-----\n${b64}\n-----END ${label}-----\n`;
}

export interface SelfSigned {
  readonly certPem: Buffer;
  readonly keyPem: Buffer;
}

export function createSelfSignedCertificate(org = 'llm-d', now = new Date()): SelfSigned {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const serial = randomBytes(16);
  serial[0] = serial[0]! & 0x7f; // a positive INTEGER
  const notAfter = new Date(now.getTime() + 365 * 24 * 3600 * 1000);
  const tbs = seq(
    tlv(0xa0, tlv(0x02, Buffer.from([0x02]))), // version v3
    tlv(0x02, serial),
    ECDSA_SHA256,
    name(org),
    seq(time(new Date(now.getTime() - 60_000)), time(notAfter)),
    name(org),
    publicKey.export({ type: 'spki', format: 'der' }),
  );
  const signature = sign('sha256', tbs, privateKey);
  const cert = seq(tbs, ECDSA_SHA256, tlv(0x03, Buffer.from([0x00]), signature));
  return {
    certPem: Buffer.from(pem('CERTIFICATE', cert)),
    keyPem: Buffer.from(privateKey.export({ type: 'pkcs8', format: 'pem' }) as string),
  };
}
