/**
 * Admission of a queued (enqueue or wait) request: the later revision's reattach rules for a
 * client-chosen id, with our fix for stale results, then the producer's submit, wire-compatible
 * with llm-d-async.
 */
import type { Logger } from 'pino';
import type { RequestContext } from '../../pipeline/context';
import type { AsyncBrokerConfig, QueuedMode } from './config';
import { computeDeadline, resolveTimeoutSeconds } from './deadline';
import { buildEnvelope, newRequestToken } from './envelope';
import type { RequestKeys } from './keys';
import { forwardedHeaders } from './request';
import { isFailedOutcome } from './responses';
import type { RouteChoice } from './routing';
import type { BrokerStore } from './store';

export type Admission =
  /** A new generation is queued. */
  | {
      readonly kind: 'submitted';
      readonly timeoutSeconds: number;
      /** Whether the replicas confirmed the write (`WAIT`); `undefined` when none was asked for. */
      readonly replicated: boolean | undefined;
    }
  /** Re-attached to a stored successful result; nothing was queued. */
  | { readonly kind: 'stored'; readonly raw: string; readonly timeoutSeconds: number }
  /** Re-attached to a live queued copy (revived if it had been cancelled); nothing was queued. */
  | { readonly kind: 'live'; readonly timeoutSeconds: number }
  /** Nothing could be queued: answer 503 ENQUEUE_FAILED. */
  | { readonly kind: 'failed'; readonly reason: string };

export interface AdmitInput {
  readonly ctx: RequestContext;
  readonly cfg: AsyncBrokerConfig;
  readonly store: BrokerStore;
  readonly mode: QueuedMode;
  readonly tenant: string;
  readonly keys: RequestKeys;
  readonly route: RouteChoice;
  /** `Date.now()`; injectable for tests. */
  readonly nowMs: number;
}

/** The client chose the id (and it survived sanitising): a re-POST may be a retry of the same request. */
export function clientChoseId(ctx: RequestContext): boolean {
  return ctx.headers['x-request-id'] === ctx.requestId;
}

type Prior = { readonly kind: 'none' } | { readonly kind: 'replace-failed' } | Admission;

/**
 * What a retry with this id finds. A stored 2xx result or a live copy is re-attached; any other
 * stored outcome (a failure, a cancellation tombstone, something malformed) is what the client is
 * retrying away from, so it is replaced by a fresh run rather than served again.
 */
async function priorState(input: AdmitInput, timeoutSeconds: number, log: Logger): Promise<Prior> {
  let state;
  try {
    state = await input.store.lookup(input.keys);
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'async-broker: retry state lookup failed, enqueueing fresh');
    return { kind: 'none' };
  }
  switch (state.kind) {
    case 'unknown':
      return { kind: 'none' };
    case 'result':
      if (isFailedOutcome(state.raw)) {
        log.info('async-broker: retry replaces a stored failed outcome with a fresh run');
        return { kind: 'replace-failed' };
      }
      log.info('async-broker: retry re-attached to a stored result');
      return { kind: 'stored', raw: state.raw, timeoutSeconds };
    case 'pending':
      try {
        if (await input.store.uncancel(input.keys)) log.info('async-broker: retry revived a cancelled queued copy');
      } catch (err) {
        log.warn({ err: (err as Error).message }, 'async-broker: reviving a cancelled copy failed');
      }
      log.info('async-broker: retry re-attached to a live queued copy');
      return { kind: 'live', timeoutSeconds };
  }
}

export async function admit(input: AdmitInput): Promise<Admission> {
  const { ctx, cfg, store, mode, tenant, keys, route } = input;
  const log = ctx.log;
  const timeoutSeconds = resolveTimeoutSeconds(mode, cfg.timeouts[mode], ctx.headers[cfg.timeoutHeader]);

  let clearMailbox = false;
  if (clientChoseId(ctx)) {
    const prior = await priorState(input, timeoutSeconds, log);
    if (prior.kind === 'stored' || prior.kind === 'live') return prior;
    clearMailbox = prior.kind === 'replace-failed';
  }

  const d = computeDeadline(input.nowMs, timeoutSeconds);
  if (!d) return { kind: 'failed', reason: 'deadline has already expired' };

  const metadata: Record<string, string> = { [cfg.quota.attribute]: tenant };
  const traceparent = ctx.headers['traceparent'];
  if (traceparent) metadata['traceparent'] = traceparent;

  const token = newRequestToken();
  const member = buildEnvelope({
    token,
    envelopeId: keys.envelopeId,
    queue: route.queue,
    resultQueue: keys.mailbox,
    created: d.created,
    deadline: d.deadline,
    payload: ctx.body,
    metadata,
    headers: forwardedHeaders(ctx.headers, cfg.forwardHeaders),
    endpoint: ctx.originalPath,
    // The queued payload is the client's real body, its big strings spliced back in.
    serialize: (value) => ctx.serialize(value),
  });
  let replicated: boolean | undefined;
  try {
    replicated = await store.submit({ keys, token, ttlMs: d.ttlMs, queue: route.queue, deadline: d.deadline, member, clearMailbox });
  } catch (err) {
    return { kind: 'failed', reason: (err as Error).message };
  }
  log.debug({ queue: route.queue, deadline: d.deadline, mode, replicated }, 'async-broker: request queued');
  return { kind: 'submitted', timeoutSeconds, replicated };
}
