/**
 * The SSRF guard's address check. It is applied to the exact address a media
 * download is about to dial, on every hop, never to a host name: the dialer only ever connects to
 * an address this guard passed.
 */
import { formatIp, inRange, parseIp, range } from './ip-address';
import type { IpAddress, IpRange } from './ip-address';

/** Why an address is refused (for logs; clients are told only that it was refused). */
export type BlockReason =
  'unspecified' | 'loopback' | 'link-local' | 'multicast' | 'carrier-grade-nat' | 'private' | 'unique-local' | 'reserved' | 'not-an-ip';

/** Every range refused whatever the config (except an explicit `allowed_ip_ranges` entry). */
const ALWAYS_BLOCKED_V4: ReadonlyArray<readonly [IpRange, BlockReason]> = [
  // "This network": 0.0.0.0 reaches the local host on Linux; upstream blocks only 0.0.0.0 itself.
  [range('0.0.0.0/8'), 'unspecified'],
  [range('127.0.0.0/8'), 'loopback'],
  // Cloud metadata services live here (169.254.169.254).
  [range('169.254.0.0/16'), 'link-local'],
  [range('100.64.0.0/10'), 'carrier-grade-nat'],
  // All multicast, and 240/4 (reserved, incl. broadcast): never an image origin.
  [range('224.0.0.0/4'), 'multicast'],
  [range('240.0.0.0/4'), 'reserved'],
];

/** RFC 1918: the only ranges `allow_private_networks` opens. */
const RFC1918: readonly IpRange[] = [range('10.0.0.0/8'), range('172.16.0.0/12'), range('192.168.0.0/16')];

const ALWAYS_BLOCKED_V6: ReadonlyArray<readonly [IpRange, BlockReason]> = [
  // ::/96 holds ::, ::1 and the deprecated IPv4-compatible forms (::7f00:1).
  [range('::/96'), 'loopback'],
  [range('fe80::/10'), 'link-local'],
  // Deprecated site-local: still routed inside some networks.
  [range('fec0::/10'), 'unique-local'],
  [range('fc00::/7'), 'unique-local'],
  [range('ff00::/8'), 'multicast'],
];

/** IPv6 prefixes that carry an IPv4 address a translator will reach: checked as that IPv4 address. */
const NAT64 = [range('64:ff9b::/96'), range('64:ff9b:1::/48')];
const SIX_TO_FOUR = range('2002::/16');

export interface AddressGuardOptions {
  /** Opens RFC 1918 IPv4 only; loopback, link-local, CGNAT and fc00::/7 stay blocked. */
  readonly allowPrivateNetworks: boolean;
  /**
   * Ranges that pass whatever else applies. Empty in production; a test or a local stack lists its
   * own loopback address here to serve images from this machine.
   */
  readonly allowedRanges?: readonly IpRange[];
}

export type GuardVerdict =
  | { readonly allowed: true; /** The canonical address to dial. */ readonly address: string; readonly family: 4 | 6 }
  | { readonly allowed: false; readonly reason: BlockReason };

export class AddressGuard {
  private readonly allowPrivate: boolean;
  private readonly allowedRanges: readonly IpRange[];

  constructor(opts: AddressGuardOptions) {
    this.allowPrivate = opts.allowPrivateNetworks;
    this.allowedRanges = opts.allowedRanges ?? [];
  }

  /** The verdict on one IP literal (mapped IPv6 is judged as the IPv4 address it carries). */
  check(address: string): GuardVerdict {
    const ip = parseIp(address);
    if (!ip) return { allowed: false, reason: 'not-an-ip' };
    if (!this.allowedRanges.some((r) => inRange(ip, r))) {
      const reason = this.blockReason(ip);
      if (reason) return { allowed: false, reason };
    }
    return { allowed: true, address: formatIp(ip), family: ip.family };
  }

  private blockReason(ip: IpAddress): BlockReason | null {
    if (ip.family === 4) return this.blockReasonV4(ip);
    for (const [r, reason] of ALWAYS_BLOCKED_V6) if (inRange(ip, r)) return reason;
    // A translator would connect to the embedded IPv4 address: judge that one.
    if (NAT64.some((r) => inRange(ip, r))) return this.blockReasonV4({ family: 4, bytes: ip.bytes.slice(12) });
    if (inRange(ip, SIX_TO_FOUR)) return this.blockReasonV4({ family: 4, bytes: ip.bytes.slice(2, 6) });
    return null;
  }

  private blockReasonV4(ip: IpAddress): BlockReason | null {
    for (const [r, reason] of ALWAYS_BLOCKED_V4) if (inRange(ip, r)) return reason;
    if (!this.allowPrivate && RFC1918.some((r) => inRange(ip, r))) return 'private';
    return null;
  }
}
