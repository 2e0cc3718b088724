/**
 * `conditional-decode`: before the cascade, ask a decode worker to serve the
 * request alone (`Prefer: if-available`). The router (the EPP) answers 412 when the decode pod it
 * would pick does not hold the prompt's prefix in its KV cache; the pipeline then continues.
 * Any other answer, errors included, is the client's answer: status, headers and body are relayed
 * as they stream in (the protocol layer sends them as a streamed immediate response).
 */
import type { JsonObject, RequestContext } from '../pipeline/context';
import { HOP_BY_HOP_HEADERS } from '../pipeline/hop-by-hop';
import { INTERNAL_RESPONSE_HEADERS } from '../pipeline/response-headers';
import { ParamReader } from '../pipeline/params';
import type { Step, StepDeps, StepFactory, StepOutcome, StepParams } from '../pipeline/step';
import type { SideCallClient, StreamingSideCallResponse } from '../pipeline/side-call';
import { requireGateway } from './gateway-required';
import { buildMmFeatures, dropTransferParams, gatewayLegHeaders, resolveFormat, type WireFormat } from './wire';

export const CONDITIONAL_DECODE_STEP = 'conditional-decode';

/** RFC 7240 preference asking the router to serve only from cache. */
export const HEADER_PREFER = 'prefer';
export const PREFER_IF_AVAILABLE = 'if-available';
/** The router's "not cached" answer. */
export const STATUS_PRECONDITION_FAILED = 412;

/** A 412 body is read (so the connection can be reused) up to this size... */
const MISS_BODY_DRAIN_BYTES = 8 * 1024;
/** ...and for at most this long; past either, the connection is dropped instead. */
const MISS_BODY_DRAIN_MS = 1000;

// Never relayed to the client: connection-level headers of the side call (as Go's reverse proxy
// strips them) and framing, which Envoy redoes for the local reply.
// Internal headers (x-peer-topology, epp-profile) are the EPPs' and ours, never the client's (PR #2365).
const HOP_BY_HOP: ReadonlySet<string> = new Set([...HOP_BY_HOP_HEADERS, 'content-length', ...INTERNAL_RESPONSE_HEADERS]);

/** The probe body in the resolved format. A shallow copy: the client body is not touched. */
export function buildConditionalDecodeBody(ctx: RequestContext, format: WireFormat): JsonObject {
  const body: JsonObject = { ...ctx.body };
  // The probe reaches a decode worker before any transfer: no transfer params are ours yet, and a
  // client's own would point the worker at a peer of its choosing (upstream forwards them as sent).
  dropTransferParams(body);
  const tokenIds = ctx.tokenIds;
  switch (format) {
    case 'chat':
      if (tokenIds && tokenIds.length > 0) {
        const tokens: JsonObject = { token_ids: tokenIds };
        const features = buildMmFeatures(ctx.multimodalEntries, false);
        if (features) tokens['features'] = features;
        body['tokens'] = tokens;
      }
      break;
    case 'completions':
      if (tokenIds && tokenIds.length > 0) body['prompt'] = tokenIds;
      break;
    case 'responses':
      // §12.9: the client body unchanged.
      break;
    case 'generate':
      // Also the shape of a chat request under use_openai_format=false: unchanged.
      break;
  }
  return body;
}

/** The worker's response headers the client may see: hop-by-hop ones (and those `connection` names) removed. */
export function relayedResponseHeaders(headers: Readonly<Record<string, string>>): Record<string, string> {
  const named = new Set<string>();
  for (const token of (headers['connection'] ?? '').split(',')) {
    const name = token.trim().toLowerCase();
    if (name) named.add(name);
  }
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (HOP_BY_HOP.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

/**
 * Reads what is left of a 412 so the pooled connection stays usable; a large or slow body is cut
 * off (the connection is then closed). Never throws.
 */
async function discardMiss(res: StreamingSideCallResponse): Promise<void> {
  let size = 0;
  const timer = setTimeout(() => res.cancel(), MISS_BODY_DRAIN_MS);
  try {
    for await (const chunk of res.body) {
      size += chunk.length;
      if (size > MISS_BODY_DRAIN_BYTES) {
        res.cancel();
        return;
      }
    }
  } catch {
    // cancelled or reset: nothing to keep
  } finally {
    clearTimeout(timer);
  }
}

class ConditionalDecodeStep implements Step {
  readonly type = CONDITIONAL_DECODE_STEP;

  constructor(
    private readonly useOpenAIFormat: boolean,
    private readonly gateway: SideCallClient,
    private readonly headersTimeoutMs: number,
  ) {}

  async execute(ctx: RequestContext): Promise<StepOutcome> {
    const format = resolveFormat(this.useOpenAIFormat, ctx.originalPath);
    const body = buildConditionalDecodeBody(ctx, format);
    const headers = gatewayLegHeaders(ctx.forwardedHeaders(), ctx.requestId, 'decode');
    headers[HEADER_PREFER] = PREFER_IF_AVAILABLE;
    ctx.log.debug({ step: CONDITIONAL_DECODE_STEP, path: ctx.originalPath }, 'sending request');

    // A transport failure (connect, reset, response-header timeout) throws a TransportError: the
    // classifier answers 502 with our JSON error body (upstream: 502 with an empty body).
    const res = await this.gateway.postStreaming(ctx.originalPath, headers, ctx.serialize(body), {
      step: CONDITIONAL_DECODE_STEP,
      signal: ctx.signal,
      headersTimeoutMs: this.headersTimeoutMs,
      log: ctx.log,
    });
    if (res.status === STATUS_PRECONDITION_FAILED) {
      await discardMiss(res);
      ctx.log.debug({ step: CONDITIONAL_DECODE_STEP }, 'cache miss (412): continuing the pipeline');
      return undefined;
    }
    ctx.log.debug({ step: CONDITIONAL_DECODE_STEP, status: res.status }, 'served by the conditional decode');
    // The body is handed over unread: the protocol layer relays it chunk by chunk, and aborting
    // the exchange (client gone) cancels this call through ctx.signal.
    return { respond: { status: res.status, headers: relayedResponseHeaders(res.headers), body: res.body }, cacheHit: true };
  }
}

export const createConditionalDecodeStep: StepFactory = (params: StepParams, deps: StepDeps): Step => {
  const gateway = requireGateway(CONDITIONAL_DECODE_STEP, deps);
  const p = new ParamReader(CONDITIONAL_DECODE_STEP, params);
  // Other keys (kv_connector, ec_connector injected by the builder) are ignored, as upstream.
  const useOpenAIFormat = p.bool('use_openai_format', true);
  return new ConditionalDecodeStep(useOpenAIFormat, gateway, deps.gatewayTimeoutMs);
};
