/**
 * The SSRF guard's own address check (reference §3.1, §9.8 TestAddressGuard_*). Pure: no address
 * here is ever resolved or dialled.
 */
import { AddressGuard } from '../../../../src/steps/media/address-guard';
import { DomainAllowlist } from '../../../../src/steps/media/domain-allowlist';
import { formatIp, inRange, parseIp, parseRange } from '../../../../src/steps/media/ip-address';

const strict = new AddressGuard({ allowPrivateNetworks: false });
const privateOk = new AddressGuard({ allowPrivateNetworks: true });

/** What the guard decides for the host of a URL, after the WHATWG parser normalised it. */
function hostOf(url: string): string {
  const h = new URL(url).hostname;
  return h.startsWith('[') ? h.slice(1, -1) : h;
}

describe('AddressGuard: blocked addresses (allow_private_networks: false)', () => {
  it.each([
    ['169.254.169.254', 'link-local', 'cloud metadata'],
    ['127.0.0.1', 'loopback', 'loopback v4'],
    ['127.255.255.254', 'loopback', 'all of 127/8'],
    ['::1', 'loopback', 'loopback v6'],
    ['fe80::1', 'link-local', 'link-local v6'],
    ['0.0.0.0', 'unspecified', 'unspecified v4'],
    ['::', 'loopback', 'unspecified v6 (in ::/96)'],
    ['100.64.0.1', 'carrier-grade-nat', 'CGNAT'],
    ['100.127.255.255', 'carrier-grade-nat', 'CGNAT top'],
    ['10.0.0.1', 'private', 'RFC1918 10/8'],
    ['172.16.0.1', 'private', 'RFC1918 172.16/12'],
    ['172.31.255.255', 'private', 'RFC1918 172.16/12 top'],
    ['192.168.1.1', 'private', 'RFC1918 192.168/16'],
    ['fc00::1', 'unique-local', 'unique local fc00::/7'],
    ['fd12:3456::1', 'unique-local', 'unique local fd00::/8'],
    ['::ffff:169.254.169.254', 'link-local', 'IPv4-mapped metadata'],
    ['::ffff:10.0.0.1', 'private', 'IPv4-mapped private'],
    ['::ffff:7f00:1', 'loopback', 'IPv4-mapped loopback, hex form'],
    ['0:0:0:0:0:ffff:127.0.0.1', 'loopback', 'IPv4-mapped loopback, long form'],
    ['::127.0.0.1', 'loopback', 'IPv4-compatible (deprecated) loopback'],
    ['0.1.2.3', 'unspecified', '"this network" 0/8'],
    ['224.0.0.1', 'multicast', 'multicast v4'],
    ['255.255.255.255', 'reserved', 'broadcast'],
    ['ff02::1', 'multicast', 'multicast v6'],
    ['fec0::1', 'unique-local', 'site-local v6 (deprecated)'],
    ['64:ff9b::a9fe:a9fe', 'link-local', 'NAT64 to metadata'],
    ['64:ff9b::7f00:1', 'loopback', 'NAT64 to loopback'],
    ['2002:a9fe:a9fe::1', 'link-local', '6to4 embedding metadata'],
    ['[::1]', 'loopback', 'bracketed literal'],
    ['fe80::1%eth0', 'link-local', 'scoped literal'],
  ])('%s is blocked (%s: %s)', (address, reason) => {
    expect(strict.check(address)).toEqual({ allowed: false, reason });
  });

  it.each([
    ['8.8.8.8', '8.8.8.8'],
    ['2001:4860:4860::8888', '2001:4860:4860::8888'],
    ['1.1.1.1', '1.1.1.1'],
    ['::ffff:8.8.8.8', '8.8.8.8'],
    ['172.32.0.1', '172.32.0.1'],
    ['100.128.0.1', '100.128.0.1'],
    ['64:ff9b::808:808', '64:ff9b::808:808'],
  ])('%s is allowed, dialled as %s', (address, canonical) => {
    expect(strict.check(address)).toMatchObject({ allowed: true, address: canonical });
  });

  it('refuses anything that is not an IP literal (a name is never judged)', () => {
    expect(strict.check('example.com')).toEqual({ allowed: false, reason: 'not-an-ip' });
    expect(strict.check('')).toEqual({ allowed: false, reason: 'not-an-ip' });
    expect(strict.check('127.0.0.1.nip.io')).toEqual({ allowed: false, reason: 'not-an-ip' });
  });
});

describe('AddressGuard: numeric host forms are normalised by the URL parser, then blocked', () => {
  it.each([
    ['http://2130706433/', '127.0.0.1'],
    ['http://0177.0.0.1/', '127.0.0.1'],
    ['http://0x7f.1/', '127.0.0.1'],
    ['http://127.1/', '127.0.0.1'],
    ['http://0x7f000001/', '127.0.0.1'],
    ['http://017700000001/', '127.0.0.1'],
    ['http://2852039166/', '169.254.169.254'],
    ['http://0xa9.0xfe.0xa9.0xfe/', '169.254.169.254'],
    ['http://[::ffff:127.0.0.1]/', '::ffff:7f00:1'],
    ['http://[::ffff:169.254.169.254]/', '::ffff:a9fe:a9fe'],
    ['http://[0:0:0:0:0:0:0:1]/', '::1'],
    ['http://0/', '0.0.0.0'],
  ])('%s -> %s -> blocked', (url, host) => {
    expect(hostOf(url)).toBe(host);
    expect(strict.check(hostOf(url)).allowed).toBe(false);
  });
});

describe('AddressGuard: allow_private_networks opens RFC1918 only', () => {
  it.each(['10.0.0.1', '172.16.5.4', '192.168.0.10', '::ffff:192.168.0.10'])('%s is allowed', (address) => {
    expect(privateOk.check(address).allowed).toBe(true);
  });

  it.each(['169.254.169.254', '127.0.0.1', '::1', '0.0.0.0', '100.64.0.1', 'fc00::1', 'fe80::1', '::ffff:127.0.0.1'])(
    '%s stays blocked',
    (address) => {
      expect(privateOk.check(address).allowed).toBe(false);
    },
  );
});

describe('AddressGuard: allowed_ip_ranges exemptions', () => {
  const guard = new AddressGuard({ allowPrivateNetworks: false, allowedRanges: [parseRange('127.0.0.1/32')!, parseRange('fd00:1::/64')!] });

  it('passes exactly the listed ranges', () => {
    expect(guard.check('127.0.0.1')).toMatchObject({ allowed: true, address: '127.0.0.1' });
    expect(guard.check('::ffff:127.0.0.1')).toMatchObject({ allowed: true, address: '127.0.0.1' });
    expect(guard.check('fd00:1::5')).toMatchObject({ allowed: true });
  });

  it('leaves every other blocked address blocked', () => {
    expect(guard.check('127.0.0.2')).toEqual({ allowed: false, reason: 'loopback' });
    expect(guard.check('::1')).toEqual({ allowed: false, reason: 'loopback' });
    expect(guard.check('169.254.169.254')).toEqual({ allowed: false, reason: 'link-local' });
    expect(guard.check('fd00:2::5')).toEqual({ allowed: false, reason: 'unique-local' });
    expect(guard.check('10.1.2.3')).toEqual({ allowed: false, reason: 'private' });
  });
});

describe('ip-address helpers', () => {
  it('formats canonically and normalises mapped addresses', () => {
    expect(formatIp(parseIp('2001:DB8:0:0:0:0:0:1')!)).toBe('2001:db8::1');
    expect(formatIp(parseIp('::ffff:1.2.3.4')!)).toBe('1.2.3.4');
    expect(formatIp(parseIp('1:0:0:1:0:0:0:1')!)).toBe('1:0:0:1::1');
    expect(formatIp(parseIp('::')!)).toBe('::');
    expect(parseIp('1.2.3')).toBeNull();
    expect(parseIp('01.2.3.4')).toBeNull();
  });

  it('parses ranges and rejects malformed ones', () => {
    expect(inRange(parseIp('10.9.8.7')!, parseRange('10.0.0.0/8')!)).toBe(true);
    expect(inRange(parseIp('11.0.0.1')!, parseRange('10.0.0.0/8')!)).toBe(false);
    expect(inRange(parseIp('172.31.0.1')!, parseRange('172.16.0.0/12')!)).toBe(true);
    expect(inRange(parseIp('172.32.0.1')!, parseRange('172.16.0.0/12')!)).toBe(false);
    expect(inRange(parseIp('10.0.0.1')!, parseRange('::ffff:10.0.0.0/104')!)).toBe(true);
    for (const bad of ['10.0.0.0/33', '::/129', 'abc/8', '10.0.0.0/x', '10.0.0.0/-1']) expect(parseRange(bad)).toBeNull();
  });
});

describe('DomainAllowlist (allowed_domains)', () => {
  it('an empty list allows any host', () => {
    expect(new DomainAllowlist([]).allows('anything.example')).toBe(true);
  });

  it('matches exactly and case-insensitively', () => {
    const list = new DomainAllowlist(['Images.Example.COM']);
    expect(list.allows('images.example.com')).toBe(true);
    expect(list.allows('IMAGES.example.com')).toBe(true);
    expect(list.allows('evil.example.com')).toBe(false);
    expect(list.allows('images.example.com.evil.test')).toBe(false);
    expect(list.allows('example.com')).toBe(false);
  });

  it('compares internationalised names in the form the URL parser produces', () => {
    const list = new DomainAllowlist(['bücher.example']);
    expect(list.allows(new URL('http://BÜCHER.example/x').hostname)).toBe(true);
  });
});
