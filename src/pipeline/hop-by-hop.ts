/**
 * Connection-level headers (RFC 9110 §7.6.1, plus the legacy Proxy-Connection): they describe one
 * hop, so they are never copied from one connection to another.
 */
export const HOP_BY_HOP_HEADERS: readonly string[] = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
];
