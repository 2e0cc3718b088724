/**
 * Redis Cluster's key slot: CRC16 (XMODEM) of the key, or of its hash tag (the text between the
 * first `{` and the next `}`, when not empty), modulo 16384. Used to tell which master a key lives on.
 */
const SLOTS = 16384;

function crc16(buf: Buffer): number {
  let crc = 0;
  for (const byte of buf) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The hash tag a key is placed by, or the whole key. */
export function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  if (open < 0) return key;
  const close = key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

export function keySlot(key: string): number {
  return crc16(Buffer.from(hashTagOf(key), 'utf8')) % SLOTS;
}
