/**
 * IP addresses as bytes, for the SSRF guard. Parsing goes through `node:net`'s own validators, so
 * only the literal forms a socket would accept are addresses here; the WHATWG URL parser has
 * already turned decimal, octal and hex IPv4 hosts (`2130706433`, `0177.0.0.1`, `0x7f.1`) into
 * dotted quads before anything reaches this module.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** 4 bytes (IPv4) or 16 bytes (IPv6), network order. */
export interface IpAddress {
  readonly family: 4 | 6;
  readonly bytes: Uint8Array;
}

export interface IpRange {
  readonly base: IpAddress;
  readonly prefix: number;
}

function parseV4(text: string): Uint8Array {
  return Uint8Array.from(text.split('.').map((p) => Number.parseInt(p, 10)));
}

function parseV6(text: string): Uint8Array {
  const out = new Uint8Array(16);
  let s = text;
  // An embedded dotted quad (`::ffff:1.2.3.4`) is the last 32 bits.
  let tail: Uint8Array | null = null;
  const lastColon = s.lastIndexOf(':');
  if (s.indexOf('.', lastColon) >= 0) {
    tail = parseV4(s.slice(lastColon + 1));
    s = s.slice(0, lastColon + 1) + '0:0';
  }
  const [head, rest] = s.includes('::') ? (s.split('::') as [string, string]) : [s, null];
  const headGroups = head === '' ? [] : head.split(':');
  const restGroups = rest === null || rest === '' ? [] : rest.split(':');
  const groups =
    rest === null ? headGroups : [...headGroups, ...new Array<string>(8 - headGroups.length - restGroups.length).fill('0'), ...restGroups];
  for (let i = 0; i < 8; i++) {
    const g = Number.parseInt(groups[i] ?? '0', 16);
    out[i * 2] = g >> 8;
    out[i * 2 + 1] = g & 0xff;
  }
  if (tail) out.set(tail, 12);
  return out;
}

/**
 * Parses an IP literal (IPv6 with or without brackets; a zone such as `%eth0` is ignored). An
 * IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is returned as the IPv4 address it stands for, so
 * every check sees the address the kernel would actually connect to. `null` for anything else.
 */
export function parseIp(text: string): IpAddress | null {
  let s = text.trim();
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1);
  const zone = s.indexOf('%');
  if (zone >= 0) s = s.slice(0, zone);
  if (isIPv4(s)) return { family: 4, bytes: parseV4(s) };
  if (!isIPv6(s)) return null;
  const bytes = parseV6(s);
  const mapped = bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff;
  if (mapped) return { family: 4, bytes: bytes.slice(12) };
  return { family: 6, bytes };
}

/** The canonical text of an address: dotted quad, or compressed lower-case IPv6 without brackets. */
export function formatIp(ip: IpAddress): string {
  const b = ip.bytes;
  if (ip.family === 4) return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((b[i]! << 8) | b[i + 1]!);
  // RFC 5952: compress the longest run (of at least two) of zero groups.
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

/** Parses `a.b.c.d/n` or `x::y/n`; a bare address is a single-address range. `null` when invalid. */
export function parseRange(text: string): IpRange | null {
  const slash = text.indexOf('/');
  const addrText = slash < 0 ? text : text.slice(0, slash);
  // A range is written in its own family: `::ffff:0:0/96` must not silently become an IPv4 range.
  const rawV6 = isIPv6(addrText.trim());
  const base = parseIp(addrText);
  if (!base) return null;
  const max = rawV6 ? 128 : 32;
  let prefix = max;
  if (slash >= 0) {
    const p = text.slice(slash + 1).trim();
    if (!/^\d{1,3}$/.test(p)) return null;
    prefix = Number(p);
    if (prefix > max) return null;
  }
  if (rawV6 && base.family === 4) {
    // A mapped range: keep it meaningful for the IPv4 addresses it covers.
    if (prefix < 96) return null;
    return { base, prefix: prefix - 96 };
  }
  return { base, prefix };
}

/** Whether `ip` lies in `range` (families must match). */
export function inRange(ip: IpAddress, range: IpRange): boolean {
  if (ip.family !== range.base.family) return false;
  let bits = range.prefix;
  for (let i = 0; bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((ip.bytes[i]! & mask) !== (range.base.bytes[i]! & mask)) return false;
  }
  return true;
}

/** A range from a literal known to be valid (module constants). */
export function range(text: string): IpRange {
  const r = parseRange(text);
  if (!r) throw new Error(`invalid IP range constant: ${text}`);
  return r;
}
