/**
 * `allowed_domains`: exact, case-insensitive host names. Checked against the URL
 * of the first request and of every redirect target, before anything is resolved or dialled.
 */
import { domainToASCII } from 'node:url';

export class DomainAllowlist {
  private readonly names: ReadonlySet<string>;

  /** An empty list allows every host (the SSRF guard still applies). */
  constructor(domains: readonly string[]) {
    // The WHATWG URL parser hands us hosts in ASCII (punycode) form; compare like with like.
    this.names = new Set(domains.map((d) => normaliseHost(d)));
  }

  get empty(): boolean {
    return this.names.size === 0;
  }

  /** `host` as `URL.hostname` gives it (IPv6 in brackets is accepted too). */
  allows(host: string): boolean {
    if (this.names.size === 0) return true;
    return this.names.has(normaliseHost(host));
  }
}

function normaliseHost(host: string): string {
  let h = host.trim().toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  // domainToASCII returns '' for IPv6 literals and invalid names; keep the original then.
  return domainToASCII(h) || h;
}
