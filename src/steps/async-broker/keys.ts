/**
 * Redis key and channel names shared with llm-d-async. These
 * strings are the wire contract: the AP derives the same names from the envelope id.
 *
 * Under Redis Cluster a transaction or script may touch only keys of one slot, and the lookup, the
 * submit and every Lua script touch several of a request's keys. The `cluster` layout therefore
 * wraps the envelope id in a hash tag (`{<tenant>:<id>}`): every key derived from it, by us or by
 * the AP (`request-active:` + id, `request-cancel:` + id, `results:req:` + id), hashes to one slot.
 * The `llm-d-async` layout (plain URL, Sentinel) keeps upstream's names unchanged.
 */

export type KeyLayout = 'llm-d-async' | 'cluster';

/** Tenant and client id joined: the envelope's `data.id` and the suffix of the marker keys. */
export function envelopeId(tenant: string, id: string, layout: KeyLayout = 'llm-d-async'): string {
  return layout === 'cluster' ? `{${tenant}:${id}}` : `${tenant}:${id}`;
}

export interface RequestKeys {
  /** `<tenant>:<id>` */
  readonly envelopeId: string;
  /** `results:req:<tenant>:<id>`: the per-request result list the AP LPUSHes to. */
  readonly mailbox: string;
  /** `request-active:<tenant>:<id>`: the generation token, alive until the deadline. */
  readonly active: string;
  /** `request-cancel:<tenant>:<id>`: a copy of the token when the request is cancelled. */
  readonly cancel: string;
}

export function requestKeys(tenant: string, id: string, layout: KeyLayout = 'llm-d-async'): RequestKeys {
  const env = envelopeId(tenant, id, layout);
  return {
    envelopeId: env,
    mailbox: `results:req:${env}`,
    active: `request-active:${env}`,
    cancel: `request-cancel:${env}`,
  };
}

/** The keyspace-notification channel an LPUSH on `key` fires in database `db`. */
export function keyspaceChannel(db: number, key: string): string {
  return `__keyspace@${db}__:${key}`;
}

/** The AP redis-quota gate's counter key: `<prefix><attribute>:<value>`, e.g. `quota:userid:acme`. */
export function quotaKey(prefix: string, attribute: string, tenant: string): string {
  return `${prefix}${attribute}:${tenant}`;
}

/** `request-cancel` TTL: 7 days, as the producer's cancel script. */
export const CANCEL_TTL_SECONDS = 604800;
