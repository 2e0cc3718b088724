/**
 * `prefill-decode`: prefill and decode in flight together, for KV connectors
 * whose prefill worker waits for its decode peer (SGLang). The serial `prefill` -> `decode` steps
 * cannot drive SGLang (llm-d-router #2974): an SGLang prefill only completes once the decode worker
 * has connected to the prefill pod's bootstrap server, and decode can only do so when its body
 * names that pod (`bootstrap_host`), the port and an integer room shared by both legs.
 *
 * ext_proc shape: the reserve and the prefill are side calls, the decode is the client
 * request rewritten and forwarded by Envoy. So the step reserves a prefill pod, starts the pinned
 * prefill, and returns without waiting for it; Envoy forwards decode while prefill runs. A prefill
 * that fails afterwards can only be logged: the forwarded decode is Envoy's, and fails (or times
 * out) on the decode worker's side.
 */
import type { JsonObject, RequestContext } from '../pipeline/context';
import { UpstreamError, UpstreamInvalidError } from '../pipeline/errors';
import { ParamReader } from '../pipeline/params';
import type { Step, StepDeps, StepFactory, StepParams } from '../pipeline/step';
import type { SideCallClient } from '../pipeline/side-call';
import { buildConcurrentKvConnector, type ConcurrentKvConnector } from '../connectors/kv';
import type { EcConnector } from '../connectors/ec';
import { buildEcConnector } from '../connectors/ec';
import { requireGateway } from './gateway-required';
import {
  CONTENT_TYPE_JSON,
  HEADER_CONTENT_TYPE,
  HEADER_EPP_PROFILE,
  HEADER_REQUEST_ID,
  buildMmFeatures,
  buildPrefillBody,
  dropTransferParams,
  gatewayLegHeaders,
  injectImageUuids,
  pathForFormat,
  resolveFormat,
} from './wire';

export const PREFILL_DECODE_STEP = 'prefill-decode';

/** Request header carrying preferences to the EPP; `reserve-endpoint` asks for a pod, not a forward. */
export const HEADER_PREFER = 'prefer';
export const PREFER_RESERVE_ENDPOINT = 'reserve-endpoint';
/** The EPP's answer to a reserve: the chosen prefill pod, `<ip>:<port>`. */
export const HEADER_RESERVED_HOST_PORT = 'x-llm-d-reserved-host-port';
/** Pins the prefill request to the reserved pod. Only the coordinator may set it. */
export const HEADER_PIN_HOST_PORT = 'x-llm-d-pin-host-port';

/** A host:port header value longer than this is not an endpoint. */
const MAX_ENDPOINT_CHARS = 300;
const HOST_CHARS = /^[A-Za-z0-9.\-:%]+$/;

/**
 * Splits the reserved endpoint (`10.0.3.7:8000`, `[fd00::7]:8000`) into host and port, as Go's
 * net.SplitHostPort; anything else is refused.
 */
export function parseReservedEndpoint(value: string): { host: string; port: number } | null {
  if (value.length === 0 || value.length > MAX_ENDPOINT_CHARS) return null;
  let host: string;
  let portText: string;
  if (value.startsWith('[')) {
    const close = value.indexOf(']');
    if (close < 0 || value[close + 1] !== ':') return null;
    host = value.slice(1, close);
    portText = value.slice(close + 2);
  } else {
    const colon = value.lastIndexOf(':');
    if (colon <= 0 || value.indexOf(':') !== colon) return null;
    host = value.slice(0, colon);
    portText = value.slice(colon + 1);
  }
  if (host.length === 0 || !HOST_CHARS.test(host) || !/^\d{1,5}$/.test(portText)) return null;
  const port = Number(portText);
  if (port < 1 || port > 65535) return null;
  return { host, port };
}

class PrefillDecodeStep implements Step {
  readonly type = PREFILL_DECODE_STEP;

  constructor(
    private readonly useOpenAIFormat: boolean,
    private readonly kv: ConcurrentKvConnector,
    private readonly ec: EcConnector,
    private readonly gateway: SideCallClient,
    private readonly headersTimeoutMs: number,
  ) {}

  /** Client headers no leg carries: preferences meant for us, and any transfer steering. */
  private get droppedHeaders(): string[] {
    return [HEADER_PREFER, HEADER_PIN_HOST_PORT, ...this.kv.conflictingHeaders];
  }

  private legHeaders(ctx: RequestContext, requestId: string): Record<string, string> {
    const headers = gatewayLegHeaders(ctx.forwardedHeaders(), requestId, 'prefill');
    for (const name of this.droppedHeaders) delete headers[name];
    return headers;
  }

  async execute(ctx: RequestContext): Promise<void> {
    const ec = this.ec.preparePrefill(ctx);
    const format = resolveFormat(this.useOpenAIFormat, ctx.originalPath);
    const path = pathForFormat(format);
    const prefillBody = buildPrefillBody(ctx, format, null, ec);

    const endpoint = await this.reserve(ctx, path, prefillBody);
    const fields = this.kv.transferFields(endpoint.host, ctx.log);
    for (const body of [prefillBody, ctx.body]) {
      for (const name of this.kv.removedBodyFields) delete body[name];
      delete body['kv_transfer_params'];
      Object.assign(body, fields);
    }
    this.shapeDecodeBody(ctx, format);

    ctx.log.info({ step: PREFILL_DECODE_STEP, path, prefillEndpoint: endpoint.value, stream: ctx.stream }, 'sending requests');
    this.startPrefill(ctx, path, prefillBody, endpoint.value);
    ctx.decode = {
      headers: {
        [HEADER_EPP_PROFILE]: 'decode',
        [HEADER_REQUEST_ID]: ctx.requestId,
        [HEADER_CONTENT_TYPE]: CONTENT_TYPE_JSON,
      },
      removeHeaders: this.droppedHeaders,
    };
  }

  /** Asks the EPP for a prefill pod without sending it anything (204 + the pod's address). */
  private async reserve(ctx: RequestContext, path: string, body: JsonObject): Promise<{ host: string; value: string }> {
    const headers = this.legHeaders(ctx, `${ctx.requestId}-reserve`);
    headers[HEADER_PREFER] = PREFER_RESERVE_ENDPOINT;
    ctx.log.debug({ step: PREFILL_DECODE_STEP, path }, 'reserving prefill endpoint');
    const res = await this.gateway.post(path, headers, ctx.serialize(body), {
      step: 'reserve-endpoint',
      signal: ctx.signal,
      headersTimeoutMs: this.headersTimeoutMs,
      okStatuses: [204],
      log: ctx.log,
    });
    if (res.status >= 400) throw new UpstreamError('prefill', res.status, res.body.toString('utf8'));
    if (res.status !== 204) {
      // An EPP that does not know the preference forwarded the ask to a model server.
      throw new UpstreamInvalidError(`prefill-decode: reserve-endpoint answered HTTP ${res.status}, expected 204`);
    }
    const value = res.header(HEADER_RESERVED_HOST_PORT);
    if (value === undefined) {
      throw new UpstreamInvalidError(
        `prefill-decode: reserve-endpoint answer has no ${HEADER_RESERVED_HOST_PORT} header; is the reserve-endpoint plugin configured in EPP?`,
      );
    }
    const endpoint = parseReservedEndpoint(value.trim());
    if (!endpoint) throw new UpstreamInvalidError('prefill-decode: invalid prefill endpoint');
    ctx.log.debug({ step: PREFILL_DECODE_STEP, status: res.status, endpoint: value.trim() }, 'reserved prefill endpoint');
    return { host: endpoint.host, value: value.trim() };
  }

  /** The decode body as the decode step shapes it, minus any transfer params. */
  private shapeDecodeBody(ctx: RequestContext, format: ReturnType<typeof resolveFormat>): void {
    injectImageUuids(ctx);
    const body = ctx.body;
    if (format === 'chat') {
      const tokens: JsonObject = { token_ids: ctx.tokenIds };
      const features = buildMmFeatures(ctx.multimodalEntries, false);
      if (features) tokens['features'] = features;
      body['tokens'] = tokens;
    } else if (format === 'completions' && ctx.tokenIds && ctx.tokenIds.length > 0) {
      body['prompt'] = ctx.tokenIds;
    }
    // No transfer params reach decode (the connector's fields are top-level bootstrap_*): a
    // client's own, at any place a worker reads them, would steer the worker.
    dropTransferParams(body);
  }

  /**
   * Sends the pinned prefill and returns at once. It runs while Envoy forwards decode; it is
   * cancelled if the client leaves before the decode request is released, and bounded by the
   * gateway timeout (headers) and twice that overall. Its answer body is drained, never kept.
   */
  private startPrefill(ctx: RequestContext, path: string, body: JsonObject, endpoint: string): void {
    const headers = this.legHeaders(ctx, `${ctx.requestId}-prefill`);
    headers[HEADER_PIN_HOST_PORT] = endpoint;
    const totalMs = this.headersTimeoutMs > 0 ? 2 * this.headersTimeoutMs : 0;
    const run = async (): Promise<void> => {
      const res = await this.gateway.postStreaming(path, headers, ctx.serialize(body), {
        step: 'prefill',
        signal: ctx.signal,
        headersTimeoutMs: this.headersTimeoutMs,
        totalTimeoutMs: totalMs,
        okStatuses: [200],
        log: ctx.log,
      });
      try {
        for await (const _ of res.body) {
          // drained: the prefill answer carries nothing decode needs
        }
      } finally {
        res.cancel();
      }
      if (res.status !== 200) throw new UpstreamError('prefill', res.status, '');
    };
    run().then(
      () => ctx.log.debug({ step: PREFILL_DECODE_STEP }, 'complete'),
      (err: unknown) =>
        ctx.log.error(
          { step: PREFILL_DECODE_STEP, err: (err as Error).message, status: err instanceof UpstreamError ? err.status : undefined },
          ctx.signal.aborted ? 'prefill cancelled: the client went away' : 'prefill failed after decode was forwarded',
        ),
    );
  }
}

export const createPrefillDecodeStep: StepFactory = (params: StepParams, deps: StepDeps): Step => {
  const gateway = requireGateway(PREFILL_DECODE_STEP, deps);
  const p = new ParamReader(PREFILL_DECODE_STEP, params);
  const useOpenAIFormat = p.bool('use_openai_format', true);
  const kv = buildConcurrentKvConnector(p.string('kv_connector', ''), PREFILL_DECODE_STEP, {
    connectorParams: params['kv_connector_params'],
  });
  const ec = buildEcConnector(p.string('ec_connector', ''), PREFILL_DECODE_STEP);
  return new PrefillDecodeStep(useOpenAIFormat, kv, ec, gateway, deps.gatewayTimeoutMs);
};
