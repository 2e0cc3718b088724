/**
 * `/__sim/*`: drive and read a simulator started in another process (the CLI, the local stack).
 *
 * - GET  /__sim/requests  -> {"name","requests":[{seq,method,path,url,headers,receivedAt,closedEarly,
 *                            status, json | bodyBase64}]}   (json when the body parsed, else base64)
 * - GET  /__sim/faults    -> {"rules":[...]} (remaining `times` shown)
 * - POST /__sim/faults    <- [rule, ...] or {"rules":[...]}; replaces all rules; 400 on a bad rule
 * - POST /__sim/reset     -> forgets recorded requests, fault rules and served prompt prefixes
 */

import { SimulatorConfigError } from './errors';
import type { FaultTable } from './faults';
import type { Recorder } from './recorder';
import { errorReply, jsonReply, Reply } from './reply';
import { isObject } from './request-fields';
import type { RecordedRequest } from './types';

export const CONTROL_PREFIX = '/__sim/';
/** Control bodies are small JSON documents. */
export const MAX_CONTROL_BODY_BYTES = 1024 * 1024;

export interface ControlTarget {
  readonly name: string;
  readonly recorder: Recorder;
  readonly faults: FaultTable;
  /** Forgets the prefixes the conditional-decode gate has seen served. */
  forgetPrefixes(): void;
}

function serialise(req: RecordedRequest): Record<string, unknown> {
  const out: Record<string, unknown> = {
    seq: req.seq,
    method: req.method,
    path: req.path,
    url: req.url,
    headers: req.headers,
    receivedAt: req.receivedAt,
    closedEarly: req.closedEarly,
    status: req.status ?? null,
  };
  if (req.json !== undefined) out.json = req.json;
  else out.bodyBase64 = req.body.toString('base64');
  return out;
}

export function controlReply(method: string, path: string, json: unknown, target: ControlTarget): Reply {
  const route = `${method} ${path}`;
  switch (route) {
    case 'GET /__sim/requests':
      return jsonReply(200, { name: target.name, requests: target.recorder.requests.map(serialise) });
    case 'GET /__sim/faults':
      return jsonReply(200, { rules: target.faults.list() });
    case 'POST /__sim/faults': {
      const rules = isObject(json) ? json.rules : json;
      try {
        target.faults.set(rules);
      } catch (err) {
        if (err instanceof SimulatorConfigError) return errorReply(400, err.message);
        throw err;
      }
      return jsonReply(200, { ok: true, rules: target.faults.list().length });
    }
    case 'POST /__sim/reset':
      target.recorder.clear();
      target.faults.set([]);
      target.forgetPrefixes();
      return jsonReply(200, { ok: true });
    default:
      return errorReply(404, `unknown control route ${route}`);
  }
}
