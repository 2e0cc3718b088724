/** Test images for the real-peer suites. */
import { crc32, deflateSync } from 'node:zlib';

/**
 * A distinct 64x64 solid-colour PNG per call, as a data URI. Distinct on purpose: the EPP's prefix
 * index would otherwise serve a later request with the same image as a conditional-decode hit.
 */
let colour = 0x203040;
export function uniqueImage(): string {
  const rgb = (colour += 0x0b0d07) & 0xffffff;
  const chunk = (type: string, data: Buffer): Buffer => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(Buffer.concat([Buffer.from(type, 'ascii'), data])));
    return Buffer.concat([len, Buffer.from(type, 'ascii'), data, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(64, 0);
  ihdr.writeUInt32BE(64, 4);
  ihdr.set([8, 2, 0, 0, 0], 8); // 8-bit RGB
  const row = Buffer.concat([Buffer.from([0]), Buffer.alloc(64 * 3).map((_, i) => (rgb >> (8 * (2 - (i % 3)))) & 0xff)]);
  const png = Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(Buffer.concat(Array.from({ length: 64 }, () => row)))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
  return `data:image/png;base64,${png.toString('base64')}`;
}
