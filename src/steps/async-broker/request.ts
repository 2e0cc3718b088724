/**
 * What the step reads from a request with the mode header, and the four checks it makes in order.
 */
import type { RequestContext } from '../../pipeline/context';
import type { StepResponse } from '../../pipeline/step';
import type { AsyncBrokerConfig } from './config';
import { badRequest } from './responses';

export type Mode = 'passthrough' | 'enqueue' | 'wait';

export const DEFAULT_TENANT = 'default';

/** The mode header, lower-cased and OWS-trimmed; `undefined` when absent or empty (mode "none"). */
export function modeValue(headers: Readonly<Record<string, string>>, cfg: AsyncBrokerConfig): string | undefined {
  const v = headers[cfg.modeHeader]?.replace(/^[ \t]+|[ \t]+$/g, '').toLowerCase();
  return v ? v : undefined;
}

/** First value of the tenant header, or `default` when missing or empty. Exact and case-sensitive. */
export function tenantOf(headers: Readonly<Record<string, string>>, cfg: AsyncBrokerConfig): string {
  const t = headers[cfg.tenantHeader];
  return t ? t : DEFAULT_TENANT;
}

export function tenantMessage(cfg: AsyncBrokerConfig): string {
  return `${cfg.tenantHeaderDisplay} must not contain ":"`;
}

export type Checked =
  { readonly ok: true; readonly mode: Mode; readonly tenant: string } | { readonly ok: false; readonly response: StepResponse };

export function checkRequest(ctx: RequestContext, rawMode: string, cfg: AsyncBrokerConfig): Checked {
  if (rawMode !== 'passthrough' && rawMode !== 'enqueue' && rawMode !== 'wait') {
    return { ok: false, response: badRequest(`unknown ${cfg.modeHeaderDisplay} value`) };
  }
  if (ctx.stream && rawMode !== 'passthrough') {
    return { ok: false, response: badRequest('stream is only supported in passthrough mode') };
  }
  if (ctx.model === '') return { ok: false, response: badRequest('model is required') };
  const tenant = tenantOf(ctx.headers, cfg);
  // Tenants and ids are joined with ":" in key names; refusing it here keeps keys from aliasing.
  if (tenant.includes(':')) return { ok: false, response: badRequest(tenantMessage(cfg)) };
  return { ok: true, mode: rawMode, tenant };
}

/**
 * Allowlisted client headers for the envelope, keyed by the configured name: matched
 * case-insensitively, first value only, empty values skipped.
 */
export function forwardedHeaders(headers: Readonly<Record<string, string>>, names: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of names) {
    const v = headers[name.toLowerCase()];
    if (v) out[name] = v;
  }
  return out;
}
