/**
 * What a client may send: the one list of headers that the gateway, the EPP or a worker acts on,
 * and the rule for every other header value the service passes on (issue #12).
 *
 * A client header is hostile until the operator trusts it (`server.trusted_client_headers`). An
 * untrusted one of the headers below is removed before any side call and from the request Envoy
 * finally forwards, whatever Envoy's own filters did; the service's own values (`epp-profile`,
 * the async broker's objective and fairness, `x-data-parallel-rank`, ...) are stamped afterwards.
 *
 * Every header that survives must have a visible-ASCII value (plus space and tab): the EPP reads
 * some of them into Prometheus labels and panicked on latin-1 bytes. A request with any other
 * byte in a header it would pass on is refused with a 400 that names the header, so nothing of it
 * reaches a side call or a worker.
 */

export type GatewayHeaderClass = 'routing' | 'tenancy' | 'transfer';

/**
 * Lower-case names, by what acts on them. Current names and deprecated aliases both: the EPP
 * reads either (llm-d-router pkg/epp/metadata/consts.go).
 */
export const GATEWAY_HEADERS: ReadonlyMap<string, GatewayHeaderClass> = new Map<string, GatewayHeaderClass>([
  // routing: which role, pod or pool serves the request
  ['epp-profile', 'routing'],
  ['x-gateway-destination-endpoint', 'routing'],
  ['x-gateway-destination-endpoint-subset', 'routing'],
  ['x-llm-d-pin-host-port', 'routing'],
  ['x-prefiller-host-port', 'routing'],
  ['prefer', 'routing'],
  ['x-llm-d-revision-decision-id', 'routing'],
  ['x-prediction-based-scheduling', 'routing'],
  // tenancy and scheduling: whose queue, which objective, what priority and deadline
  ['x-llm-d-inference-fairness-id', 'tenancy'],
  ['x-gateway-inference-fairness-id', 'tenancy'],
  ['x-llm-d-inference-objective', 'tenancy'],
  ['x-gateway-inference-objective', 'tenancy'],
  ['x-gateway-priority', 'tenancy'],
  ['x-llm-d-inference-ttl', 'tenancy'],
  ['x-gateway-model-name', 'tenancy'],
  ['x-llm-d-model-name-rewrite', 'tenancy'],
  ['x-gateway-model-name-rewrite', 'tenancy'],
  ['x-llm-d-slo-ttft-ms', 'tenancy'],
  ['x-slo-ttft-ms', 'tenancy'],
  ['x-llm-d-slo-tpot-ms', 'tenancy'],
  ['x-slo-tpot-ms', 'tenancy'],
  // transfer: how KV moves between prefill and decode
  ['x-data-parallel-rank', 'transfer'],
  ['x-peer-topology', 'transfer'],
]);

/** A client may never set these, whatever the configuration says: they name a role or a pod. */
export const NEVER_TRUSTED: ReadonlySet<string> = new Set([
  'epp-profile',
  'x-gateway-destination-endpoint',
  'x-gateway-destination-endpoint-subset',
]);

export interface HeaderPolicy {
  /** Gateway headers a client may set (lower-case), e.g. the SLO headers. Default none. */
  readonly trusted: ReadonlySet<string>;
  /**
   * Gateway headers also trusted on a request that came through a trusted entry, by the entry's
   * origin ({@link RequestHead.origin}, a fact the protocol layer vouches for: for Envoy, gRPC
   * metadata its filter adds, which a client cannot set). E.g. `async-processor` -> the fairness
   * id and objective llm-d-async stamps on its dispatches. Default none.
   */
  readonly origins?: ReadonlyMap<string, ReadonlySet<string>>;
}

export const DEFAULT_HEADER_POLICY: HeaderPolicy = { trusted: new Set() };

/** The origin of the async processor's entry (envoy/: the `async` listener's ext_proc metadata). */
export const ASYNC_PROCESSOR_ORIGIN = 'async-processor';

/** Why a trusted-header list is unusable; the config layer reports it against its key. */
export class HeaderPolicyError extends Error {
  override readonly name = 'HeaderPolicyError';
  constructor(
    /** The listed name. */
    readonly header: string,
    /** What a listed name must be, for the config error. */
    readonly expected: string,
  ) {
    super(`${JSON.stringify(header)}: expected ${expected}`);
  }
}

/**
 * The policy from an operator's list. Only names of {@link GATEWAY_HEADERS} make sense (any other
 * header already passes); the routing names of {@link NEVER_TRUSTED} are refused.
 */
export function headerPolicy(trusted: readonly string[], origins: Readonly<Record<string, readonly string[]>> = {}): HeaderPolicy {
  const byOrigin = new Map<string, ReadonlySet<string>>();
  for (const [origin, names] of Object.entries(origins)) byOrigin.set(origin, trustedSet(names));
  return { trusted: trustedSet(trusted), ...(byOrigin.size > 0 ? { origins: byOrigin } : {}) };
}

function trustedSet(trusted: readonly string[]): ReadonlySet<string> {
  const set = new Set<string>();
  for (const raw of trusted) {
    const name = raw.trim().toLowerCase();
    if (name === '') continue;
    if (NEVER_TRUSTED.has(name))
      throw new HeaderPolicyError(name, `a header other than ${[...NEVER_TRUSTED].join(', ')} (they name a worker role or pod)`);
    if (!GATEWAY_HEADERS.has(name))
      throw new HeaderPolicyError(
        name,
        `one of the gateway headers (${[...GATEWAY_HEADERS.keys()].join(', ')}); any other header already passes`,
      );
    set.add(name);
  }
  return set;
}

/** Space, tab and the visible ASCII characters: what a header value we pass on may contain. */
const VISIBLE_ASCII = /^[\x20-\x7e\t]*$/;

export interface ScreenedHeaders {
  /** The client's headers without the untrusted gateway headers. */
  readonly headers: Record<string, string>;
  /** Untrusted gateway headers the client sent: removed from the request Envoy forwards. */
  readonly removed: readonly string[];
  /** The first surviving header whose value is not visible ASCII: the request gets a 400. */
  readonly invalid: string | undefined;
}

/**
 * Applies the policy to a request's headers (lower-case names, as the protocol layer gives them).
 * `origin` is the trusted entry the request came through, if any; an unknown origin trusts nothing more.
 */
export function screenHeaders(
  headers: Readonly<Record<string, string>>,
  policy: HeaderPolicy,
  origin?: string,
  /** Later values of repeated names (RequestHead.laterValues): a kept header passes on with all of them. */
  laterValues?: Readonly<Record<string, readonly string[]>>,
): ScreenedHeaders {
  const kept: Record<string, string> = {};
  const removed: string[] = [];
  let invalid: string | undefined;
  const fromOrigin = origin === undefined ? undefined : policy.origins?.get(origin);
  for (const name in headers) {
    const value = headers[name]!;
    if (GATEWAY_HEADERS.has(name) && !policy.trusted.has(name) && !fromOrigin?.has(name)) {
      removed.push(name);
      continue;
    }
    const later = laterValues && Object.hasOwn(laterValues, name) ? laterValues[name] : undefined;
    if (!VISIBLE_ASCII.test(value) || later?.some((v) => !VISIBLE_ASCII.test(v))) {
      // The service replaces a bad request id with its own (request-id.ts) rather than refusing it.
      if (name === 'x-request-id') continue;
      invalid ??= name;
    }
    kept[name] = value;
  }
  return { headers: kept, removed, invalid };
}

/** The client-facing message for {@link ScreenedHeaders.invalid}. */
export function invalidHeaderMessage(name: string): string {
  return `header "${name}" has a value that is not visible ASCII`;
}
