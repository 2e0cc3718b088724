/**
 * `prefill`: one single-token, non-streaming request through the gateway to a
 * prefill worker, whose answer carries the KV-cache location decode will pull from.
 */
import type { DisaggregationPath, RequestContext } from '../pipeline/context';
import { TransportError, UpstreamError, UpstreamInvalidError } from '../pipeline/errors';
import { ParamReader } from '../pipeline/params';
import type { Step, StepDeps, StepFactory, StepParams } from '../pipeline/step';
import type { SideCallClient, SideCallResponse } from '../pipeline/side-call';
import type { KvConnector } from '../connectors/kv';
import { buildKvConnector } from '../connectors/kv';
import type { EcConnector } from '../connectors/ec';
import { buildEcConnector } from '../connectors/ec';
import { requireGateway } from './gateway-required';
import { isNoPrefillEndpointAnswer } from './no-endpoint';
import { redactHeaders } from '../pipeline/redact';
import { byteLength } from './wire';
import {
  buildPrefillBody,
  coerceParamsMap,
  decodeFirstJsonValue,
  gatewayLegHeaders,
  isJsonObject,
  jsonTypeName,
  pathForFormat,
  resolveFormat,
} from './wire';

export const PREFILL_STEP = 'prefill';

/** Default extra attempts for a prefill that could not connect or got a 5xx. */
export const DEFAULT_PREFILL_RETRIES = 1;
/** More attempts only multiply the wait of a request that is failing anyway. */
const MAX_PREFILL_RETRIES = 3;

/** The side-call client refused the request itself (nothing was sent): another attempt fails the same way. */
const LOCAL_REFUSAL = /UND_ERR_(INVALID_ARG|NOT_SUPPORTED)|response body too large/;

/**
 * Whether a failed prefill attempt may be sent again through the gateway (so the EPP can pick
 * another pod): the call never got an answer it could use because the connection failed or was
 * reset, or the gateway/worker answered 5xx. Never for a 4xx (the client's answer), a timeout (the
 * budget is spent, and the worker may still be busy with it) or a client that went away.
 */
function retryable(outcome: { status: number } | { error: unknown }): boolean {
  if ('status' in outcome) return outcome.status >= 500;
  const err = outcome.error;
  return err instanceof TransportError && !err.timedOut && !LOCAL_REFUSAL.test(err.message);
}

/** Selective disaggregation (issue #15): when a request skips the prefill leg. */
export interface SelectiveDisaggregation {
  /** Prompts with fewer rendered tokens decode aggregated; 0 = always disaggregate. */
  readonly minPromptTokens: number;
  /** Serve aggregated on decode when the EPP has no prefill endpoint (see no-endpoint.ts). */
  readonly fallbackToDecode: boolean;
}

const NO_SELECTIVE: SelectiveDisaggregation = { minPromptTokens: 0, fallbackToDecode: false };

class PrefillStep implements Step {
  readonly type = PREFILL_STEP;

  constructor(
    private readonly useOpenAIFormat: boolean,
    private readonly kv: KvConnector,
    private readonly ec: EcConnector,
    private readonly gateway: SideCallClient,
    private readonly headersTimeoutMs: number,
    private readonly retries: number,
    private readonly selective: SelectiveDisaggregation = NO_SELECTIVE,
  ) {}

  async execute(ctx: RequestContext): Promise<void> {
    // Token ids exist only when a render step ran; without a count the request is disaggregated.
    const min = this.selective.minPromptTokens;
    if (min > 0 && ctx.tokenIds !== null && ctx.tokenIds.length < min) {
      this.aggregate(ctx, 'aggregated_short_prompt', { prompt_tokens: ctx.tokenIds.length, min_prompt_tokens: min });
      return;
    }
    // Conflicting EC descriptors fail here, before the gateway is contacted.
    const ec = this.ec.preparePrefill(ctx);
    const kv = this.kv.preparePrefill(ctx);
    const format = resolveFormat(this.useOpenAIFormat, ctx.originalPath);
    const body = ctx.serialize(buildPrefillBody(ctx, format, kv, ec));
    const path = pathForFormat(format);
    const headers = gatewayLegHeaders(ctx.forwardedHeaders(), ctx.requestId, 'prefill');
    Object.assign(headers, this.kv.prefillHeaders?.(ctx));
    if (ctx.log.isLevelEnabled('debug')) {
      ctx.log.debug(
        { step: PREFILL_STEP, method: 'POST', path, bodyLen: byteLength(body), headers: redactHeaders(headers) },
        'request body',
      );
    }

    const res = await this.send(ctx, path, headers, body);
    // Only a complete error answer from the EPP itself: prefill is never streamed, and nothing
    // that reached a prefill worker (any 200, any worker error) can lead here.
    if (this.selective.fallbackToDecode && isNoPrefillEndpointAnswer(res)) {
      this.aggregate(ctx, 'aggregated_fallback', { upstream_status: res.status });
      return;
    }
    if (res.status !== 200) throw new UpstreamError(PREFILL_STEP, res.status, res.body.toString('utf8'));

    let answer: unknown;
    try {
      answer = decodeFirstJsonValue(res.body);
    } catch (err) {
      throw new UpstreamInvalidError(`prefill: decode response: ${(err as Error).message}`);
    }
    // Upstream decodes into a struct: null is an empty answer, any other non-object a failure.
    if (answer !== null && !isJsonObject(answer)) {
      throw new UpstreamInvalidError(`prefill: decode response: expected an object, got ${jsonTypeName(answer)}`);
    }
    ctx.kvTransferParams = coerceParamsMap(answer?.['kv_transfer_params'], 'kv_transfer_params', ctx.log);
    ctx.disaggregation = 'disaggregated';
    ctx.captureResponseHeaders(res);
    ctx.capturePeerTopology(res);
    // Stamped headers ride on the request Envoy finally forwards, so decode gets them too.
    for (const [name, value] of Object.entries(this.kv.decodeHeaders?.(ctx) ?? {})) ctx.stampHeader(name, value);
    ctx.log.debug({ step: PREFILL_STEP }, 'complete');
  }

  /** No prefill leg (or none that counts): decode serves the whole request with no KV params. */
  private aggregate(ctx: RequestContext, path: DisaggregationPath, fields: Record<string, number>): void {
    ctx.disaggregation = path;
    ctx.kvTransferParams = null;
    ctx.log.debug({ step: PREFILL_STEP, disaggregation: path, ...fields }, 'prefill skipped; decoding aggregated');
  }

  /**
   * The prefill call, sent again (at most `retries` times) after a connect failure, a reset or a
   * 5xx. Decode has not started while this runs (it is the request Envoy forwards once the pipeline
   * is done), so a retry can never replay work a decode worker already began.
   */
  private async send(ctx: RequestContext, path: string, headers: Record<string, string>, body: Buffer[]): Promise<SideCallResponse> {
    for (let attempt = 0; ; attempt++) {
      let res: SideCallResponse;
      try {
        res = await this.gateway.post(path, headers, body, {
          step: PREFILL_STEP,
          signal: ctx.signal,
          headersTimeoutMs: this.headersTimeoutMs,
          // gateway.timeout bounds the wait for headers (as upstream); a body trickled after them
          // must not hold the request forever either.
          totalTimeoutMs: this.headersTimeoutMs > 0 ? 2 * this.headersTimeoutMs : 0,
          okStatuses: [200],
          log: ctx.log,
        });
      } catch (error) {
        if (attempt >= this.retries || ctx.signal.aborted || !retryable({ error })) throw error;
        ctx.log.warn(
          { step: PREFILL_STEP, attempt: attempt + 1, err: (error as Error).message },
          'prefill failed; retrying through the gateway',
        );
        continue;
      }
      if (res.status === 200 || attempt >= this.retries || ctx.signal.aborted || !retryable(res)) return res;
      ctx.log.warn({ step: PREFILL_STEP, attempt: attempt + 1, status: res.status }, 'prefill failed; retrying through the gateway');
      if (ctx.log.isLevelEnabled('debug'))
        ctx.log.debug(
          { step: PREFILL_STEP, upstream_body: res.body.toString('utf8') },
          'failed prefill attempt body (not returned to the client)',
        );
    }
  }
}

export const createPrefillStep: StepFactory = (params: StepParams, deps: StepDeps): Step => {
  const gateway = requireGateway(PREFILL_STEP, deps);
  const p = new ParamReader(PREFILL_STEP, params);
  const useOpenAIFormat = p.bool('use_openai_format', true);
  const kv = buildKvConnector(p.string('kv_connector', ''), PREFILL_STEP, {
    dpSize: p.int('dp_size', 1, { min: 1 }),
    connectorParams: params['kv_connector_params'],
  });
  const ec = buildEcConnector(p.string('ec_connector', ''), PREFILL_STEP);
  const retries = p.int('retries', DEFAULT_PREFILL_RETRIES, { min: 0, max: MAX_PREFILL_RETRIES });
  const selective: SelectiveDisaggregation = {
    minPromptTokens: p.int('min_prompt_tokens', 0, { min: 0 }),
    fallbackToDecode: p.bool('fallback_to_decode', false),
  };
  return new PrefillStep(useOpenAIFormat, kv, ec, gateway, deps.gatewayTimeoutMs, retries, selective);
};
