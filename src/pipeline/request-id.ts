import { randomUUID } from 'node:crypto';

const VALID = /^[a-zA-Z0-9-]{1,128}$/;

/** The client's `x-request-id` when it is safe to reflect, else a fresh UUIDv4. */
export function sanitiseRequestId(raw: string | undefined): { id: string; rejectedLength?: number } {
  if (raw !== undefined && VALID.test(raw)) return { id: raw };
  return raw === undefined ? { id: randomUUID() } : { id: randomUUID(), rejectedLength: raw.length };
}
