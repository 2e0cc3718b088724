/**
 * The routes the step answers itself (fetch, delete, models), with the later
 * upstream revision's validation, fixed error texts and cancelling DELETE.
 * Tenant-scoped: a wrong tenant looks at other keys and finds nothing (410), so ids cannot be probed.
 */
import type { Route, RouteRequest, StepResponse } from '../../pipeline/step';
import type { AsyncBrokerConfig } from './config';
import { goEncode } from './go-json';
import { requestKeys } from './keys';
import { tenantMessage, tenantOf } from './request';
import {
  badRequest,
  DELETE_FAILED_MESSAGE,
  errorResponse,
  LOOKUP_FAILED_MESSAGE,
  pendingResponse,
  storedEntryResponse,
  UNKNOWN_REQUEST_MESSAGE,
} from './responses';
import { routedModels } from './routing';
import type { BrokerStore } from './store';

const REQUEST_PATH = /^\/v1\/requests\/([^/]+)$/;
const VALID_ID = /^[a-zA-Z0-9-]{1,128}$/;
export const INVALID_ID_MESSAGE = 'request id must be 1-128 alphanumeric or dash characters';

function matchRequestPath(path: string): Record<string, string> | null {
  const m = REQUEST_PATH.exec(path);
  return m ? { id: m[1]! } : null;
}

/** Tenant and id checks shared by GET and DELETE; `null` when both are acceptable. */
function validate(req: RouteRequest, cfg: AsyncBrokerConfig): StepResponse | null {
  if (tenantOf(req.headers, cfg).includes(':')) return badRequest(tenantMessage(cfg));
  if (!VALID_ID.test(req.params['id'] ?? '')) return badRequest(INVALID_ID_MESSAGE);
  return null;
}

export function fetchRoute(cfg: AsyncBrokerConfig, store: BrokerStore): Route {
  return {
    method: 'GET',
    match: matchRequestPath,
    async handle(req) {
      const invalid = validate(req, cfg);
      if (invalid) return invalid;
      const id = req.params['id']!;
      const keys = requestKeys(tenantOf(req.headers, cfg), id);
      let state;
      try {
        state = await store.lookup(keys);
      } catch (err) {
        req.log.warn({ err: (err as Error).message }, 'async-broker: result lookup failed');
        return errorResponse(500, 'api_error', 'LOOKUP_FAILED', LOOKUP_FAILED_MESSAGE);
      }
      switch (state.kind) {
        case 'pending':
          return pendingResponse(id);
        case 'unknown':
          return errorResponse(410, 'invalid_request_error', 'UNKNOWN_REQUEST', UNKNOWN_REQUEST_MESSAGE);
        case 'result': {
          const response = storedEntryResponse(state.raw);
          // A delivered result shrinks to the grace window (re-set on every delivered GET).
          if (!req.signal.aborted) {
            const reclaim =
              cfg.fetchGraceSeconds > 0 ? store.expireKey(keys.mailbox, cfg.fetchGraceSeconds) : store.deleteKey(keys.mailbox);
            await reclaim.catch((err: Error) => req.log.warn({ err: err.message }, 'async-broker: shrinking the delivered mailbox failed'));
          }
          return response;
        }
      }
    },
  };
}

export function deleteRoute(cfg: AsyncBrokerConfig, store: BrokerStore): Route {
  return {
    method: 'DELETE',
    match: matchRequestPath,
    async handle(req) {
      const invalid = validate(req, cfg);
      if (invalid) return invalid;
      const keys = requestKeys(tenantOf(req.headers, cfg), req.params['id']!);
      // Cancel first, so a still-queued request is never dispatched (the AP stores CANCELLED instead).
      try {
        await store.cancel(keys);
      } catch (err) {
        req.log.warn({ err: (err as Error).message }, 'async-broker: cancel before delete failed');
      }
      try {
        await store.deleteKey(keys.mailbox);
      } catch (err) {
        req.log.warn({ err: (err as Error).message }, 'async-broker: deleting the result failed');
        return errorResponse(500, 'api_error', 'DELETE_FAILED', DELETE_FAILED_MESSAGE);
      }
      return { status: 204, headers: {}, body: Buffer.alloc(0) };
    },
  };
}

/**
 * `GET /v1/models`: the routed model names (no tenant filtering). Without any (no route names a
 * model), the route matches nothing and the request passes through to decode, so a client sees the
 * served model as vLLM lists it rather than an empty list; upstream answers `{"data":[]}`.
 */
export function modelsRoute(cfg: AsyncBrokerConfig): Route {
  const models = routedModels(cfg.routes);
  const body = goEncode({
    data: models.map((id) => ({ id, object: 'model', owned_by: 'llm-d-async' })),
    object: 'list',
  });
  return {
    method: 'GET',
    match: (path) => (path === '/v1/models' && models.length > 0 ? {} : null),
    handle: async () => ({ status: 200, headers: { 'content-type': 'application/json' }, body }),
  };
}
