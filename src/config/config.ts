import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';
import { ConfigError } from './errors';
import { parseDuration } from './duration';
import { KEYS, type KeySpec } from './schema';
import { metricsAddress, parseTls, type ListenAddress, type TlsFiles } from './listen';

export { parseListenAddress, type ListenAddress, type TlsFiles } from './listen';

export interface StepConfig {
  readonly type: string;
  readonly params: Record<string, unknown>;
}

export interface AppConfig {
  readonly logLevel: number;
  /** Export OpenTelemetry spans (W3C trace context is forwarded either way). */
  readonly tracing: boolean;
  readonly server: {
    readonly listenAddr: string;
    readonly maxRequestBodyBytes: number;
    readonly bodyMode: 'auto' | 'full_duplex' | 'buffered';
    readonly metadataNamespace: string;
    readonly shutdownTimeoutMs: number;
    /** `server.drain_delay`: NOT_SERVING but still accepting, before the drain refuses new streams. */
    readonly drainDelayMs: number;
    /** `server.workers`: processes serving the ext_proc port (1 = this process alone, no cluster primary). */
    readonly workers: number;
    /** `host:port` of the Prometheus listener; `null` = disabled. */
    readonly metricsAddr: ListenAddress | null;
    readonly streamedResponses: boolean;
    /** `server.stream_idle_timeout` in ms; 0 = off. */
    readonly streamIdleTimeoutMs: number;
    /** `server.max_request_headers`: Envoy's header-count limit; 0 = no check. */
    readonly maxRequestHeaders: number;
    /** `server.trusted_client_headers`, as listed (checked against the header policy at start-up). */
    readonly trustedClientHeaders: readonly string[];
    /** `server.allowed_paths` as listed (parsed into the path policy at start-up); `undefined` = the built-in list. */
    readonly allowedPaths: readonly string[] | undefined;
    /** `server.trusted_origin_headers`: also trusted on the async processor's entry. */
    readonly trustedOriginHeaders: readonly string[];
    /** TLS on the gRPC listener; `null` = plaintext h2c. */
    readonly tls: TlsFiles | null;
    /** `server.stream_reset_burst` / `stream_reset_rate`: the HTTP/2 sessions' RST_STREAM budget. */
    readonly sessionLimits: { readonly streamResetBurst: number; readonly streamResetRate: number };
  };
  readonly gateway: {
    readonly address: string;
    readonly timeoutMs: number;
    readonly maxIdleConnsPerHost: number;
    readonly idleConnTimeoutMs: number;
  };
  readonly pipeline: {
    readonly kvConnector: string | undefined;
    readonly ecConnector: string | undefined;
    readonly useOpenaiFormat: boolean;
    /** `pipeline.dp_size`; 0 = not handed to the steps. */
    readonly dpSize: number;
    /** `pipeline.kv_connector_params` (a map; empty or absent = undefined), validated by the KV connector. */
    readonly kvConnectorParams: Record<string, unknown> | undefined;
    /**
     * `pipeline.forward_response_headers` as written (`undefined` = absent). The pipeline validates
     * the names when it is built (src/pipeline/response-headers.ts).
     */
    readonly forwardResponseHeaders: readonly unknown[] | undefined;
    /** `pipeline.request_limits.<name>` by name (every key of schema.ts, defaults filled in). */
    readonly requestLimits: Readonly<Record<string, number>>;
    readonly steps: readonly StepConfig[];
  };
  /** Unknown keys and inert upstream keys, to log at start-up. */
  readonly warnings: readonly string[];
}

const MIB = 1024 * 1024;
/** `server.workers` upper bound. */
export const MAX_WORKERS = 64;
/** Scalar keys that sit at the top level of the document, not in a section. */
const TOP_LEVEL_KEYS = new Set(KEYS.filter((k) => !k.key.includes('.')).map((k) => k.key));
const KNOWN_SECTIONS: Record<string, Set<string>> = {};
for (const spec of KEYS) {
  const dot = spec.key.indexOf('.');
  if (dot < 0) continue;
  const section = spec.key.slice(0, dot);
  (KNOWN_SECTIONS[section] ??= new Set()).add(spec.key.slice(dot + 1));
}
KNOWN_SECTIONS['pipeline']!.add('steps');
KNOWN_SECTIONS['pipeline']!.add('kv_connector_params');
KNOWN_SECTIONS['pipeline']!.add('forward_response_headers');
const REQUEST_LIMITS_PREFIX = 'pipeline.request_limits.';
const REQUEST_LIMIT_KEYS = KEYS.filter((k) => k.key.startsWith(REQUEST_LIMITS_PREFIX));
KNOWN_SECTIONS['pipeline']!.add('request_limits');

function isMap(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function lookup(root: Record<string, unknown>, key: string): unknown {
  let cur: unknown = root;
  for (const part of key.split('.')) {
    if (!isMap(cur)) return undefined;
    cur = cur[part];
  }
  return cur;
}

/** `server.max_request_body_size` -> `COORDINATOR_SERVER_MAX_REQUEST_BODY_SIZE`, as upstream. */
export function envName(key: string): string {
  return 'COORDINATOR_' + key.toUpperCase().replace(/\./g, '_');
}

/** Environment values are text; they are read with the key's own type. */
function fromEnv(spec: KeySpec, text: string): unknown {
  switch (spec.type) {
    case 'int': {
      const n = Number(text.trim());
      return text.trim() !== '' && Number.isFinite(n) ? n : text;
    }
    case 'bool': {
      const t = text.trim().toLowerCase();
      if (t === 'true' || t === '1') return true;
      if (t === 'false' || t === '0') return false;
      return text;
    }
    default:
      return text;
  }
}

function checkValue(spec: KeySpec, v: unknown, where: string): number | boolean | string {
  switch (spec.type) {
    case 'int':
      if (typeof v !== 'number' || !Number.isInteger(v)) throw new ConfigError(where, 'an integer', v);
      if (spec.min !== undefined && v < spec.min) throw new ConfigError(where, `an integer >= ${spec.min}`, v);
      return v;
    case 'bool':
      if (typeof v !== 'boolean') throw new ConfigError(where, 'true or false', v);
      return v;
    case 'duration': {
      const ms = typeof v === 'string' ? parseDuration(v) : null;
      if (ms === null) throw new ConfigError(where, 'a duration such as "30s"', v);
      return ms;
    }
    case 'enum':
      if (typeof v !== 'string' || !spec.values!.includes(v)) throw new ConfigError(where, `one of ${spec.values!.join(', ')}`, v);
      return v;
    case 'list':
      // Kept as one comma-separated string (the environment's form); split where it is used.
      if (typeof v === 'string') return v;
      if (!Array.isArray(v) || v.some((e) => typeof e !== 'string' || e.includes(','))) throw new ConfigError(where, 'a list of strings', v);
      return v.join(',');
    case 'string':
      if (typeof v !== 'string') throw new ConfigError(where, 'a string', v);
      return v;
  }
}

function parseSteps(raw: unknown): StepConfig[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw new ConfigError('pipeline.steps', 'a list of {type, params}', raw);
  return raw.map((item, i) => {
    if (!isMap(item)) throw new ConfigError(`pipeline.steps[${i}]`, 'a map with a "type"', item);
    if (typeof item['type'] !== 'string' || item['type'] === '') throw new ConfigError(`pipeline.steps[${i}].type`, 'a step type name', item['type']);
    const params = item['params'];
    if (params !== undefined && params !== null && !isMap(params)) throw new ConfigError(`pipeline.steps[${i}].params`, 'a map', params);
    return { type: item['type'], params: { ...(params ?? {}) } };
  });
}

/**
 * Builds the configuration from a parsed YAML document and the environment. Environment overrides
 * (`COORDINATOR_<KEY>`) win over the file, for every scalar key. Step params cannot be set from the
 * environment (they live in a list), as upstream.
 */
export function parseConfig(input: unknown, env: NodeJS.ProcessEnv = process.env): AppConfig {
  if (input === undefined || input === null) input = {};
  if (!isMap(input)) throw new ConfigError('(top level)', 'a map of sections (server, gateway, pipeline, ...)', input);
  const warnings: string[] = [];
  const doc = lowerCaseKeys(input, warnings);
  for (const [section, value] of Object.entries(doc)) {
    if (TOP_LEVEL_KEYS.has(section)) continue;
    const known = KNOWN_SECTIONS[section];
    if (!known) {
      warnings.push(`unknown top-level key "${section}" ignored`);
      continue;
    }
    if (value === null || value === undefined) continue;
    if (!isMap(value)) throw new ConfigError(section, 'a map', value);
    for (const k of Object.keys(value)) if (!known.has(k)) warnings.push(`unknown key "${section}.${k}" ignored`);
  }
  const limitsDoc = lookup(doc, 'pipeline.request_limits');
  if (limitsDoc !== undefined && limitsDoc !== null && !isMap(limitsDoc)) throw new ConfigError('pipeline.request_limits', 'a map', limitsDoc);
  for (const k of Object.keys(limitsDoc ?? {}))
    if (!REQUEST_LIMIT_KEYS.some((spec) => spec.key === REQUEST_LIMITS_PREFIX + k)) warnings.push(`unknown key "${REQUEST_LIMITS_PREFIX}${k}" ignored`);

  const values = new Map<string, number | boolean | string | undefined>();
  for (const spec of KEYS) {
    const envText = env[envName(spec.key)];
    let raw: unknown = lookup(doc, spec.key);
    let where = spec.key;
    if (envText !== undefined) {
      raw = fromEnv(spec, envText);
      where = `${spec.key} (from ${envName(spec.key)})`;
    }
    if (raw === undefined || raw === null) {
      values.set(spec.key, spec.default === undefined ? undefined : checkValue(spec, spec.default, spec.key));
      continue;
    }
    // A quoted number or boolean in the file loads as upstream's loader reads it (Helm templates
    // quote freely); durations stay strict: a bare `60` is an error here, never 60 ns.
    if (envText === undefined && typeof raw === 'string' && (spec.type === 'int' || spec.type === 'bool')) raw = fromEnv(spec, raw);
    if (spec.inert) warnings.push(`${spec.key} has no effect in the ext_proc service (Envoy owns client connections)`);
    values.set(spec.key, checkValue(spec, raw, where));
  }
  const get = <T>(k: string) => values.get(k) as T;

  const bodyMb = get<number>('server.max_request_body_size') || 64;
  if (bodyMb * MIB > 1024 * MIB) throw new ConfigError('server.max_request_body_size', 'at most 1024 (MiB)', bodyMb);
  const streamIdleMs = get<number>('server.stream_idle_timeout');
  // Shorter would cut the gap between Envoy's own messages under load; longer overflows a timer.
  if (streamIdleMs !== 0 && (streamIdleMs < 100 || streamIdleMs > 86_400_000)) {
    throw new ConfigError('server.stream_idle_timeout', '0 (off) or a duration from 100ms to 24h', `${streamIdleMs}ms`);
  }
  const drainDelayMs = get<number>('server.drain_delay');
  if (drainDelayMs > 300_000) throw new ConfigError('server.drain_delay', 'at most 5m', `${drainDelayMs}ms`);
  const workers = get<number>('server.workers');
  // Each worker is a whole service (its own heap, pools and timers): beyond a large node's cores it only costs memory.
  if (workers > MAX_WORKERS) throw new ConfigError('server.workers', `an integer from 1 to ${MAX_WORKERS}`, workers);
  const maxRequestHeaders = get<number>('server.max_request_headers');
  if (maxRequestHeaders > 65535) throw new ConfigError('server.max_request_headers', 'at most 65535', maxRequestHeaders);
  const sessionLimits = { streamResetBurst: get<number>('server.stream_reset_burst'), streamResetRate: get<number>('server.stream_reset_rate') };
  for (const [key, v] of [['server.stream_reset_burst', sessionLimits.streamResetBurst], ['server.stream_reset_rate', sessionLimits.streamResetRate]] as const) {
    // nghttp2 keeps both in uint32.
    if (v > 2 ** 32 - 1) throw new ConfigError(key, 'at most 4294967295', v);
  }
  const requestLimits: Record<string, number> = {};
  for (const spec of REQUEST_LIMIT_KEYS) {
    const v = get<number>(spec.key);
    // Compared with client numbers, which are exact only up to 2^53.
    if (!Number.isSafeInteger(v)) throw new ConfigError(spec.key, `an integer from ${spec.min ?? 0} to ${Number.MAX_SAFE_INTEGER}`, v);
    requestLimits[spec.key.slice(REQUEST_LIMITS_PREFIX.length)] = v;
  }
  const kv = get<string | undefined>('pipeline.kv_connector');
  const ec = get<string | undefined>('pipeline.ec_connector');
  const pipelineDoc = isMap(doc['pipeline']) ? doc['pipeline'] : {};
  const address = (get<string | undefined>('gateway.address') ?? '').replace(/\/+$/, '');
  if (address !== '') {
    let url: URL;
    try {
      url = new URL(address);
    } catch {
      throw new ConfigError('gateway.address', 'an http:// or https:// URL', address);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ConfigError('gateway.address', 'an http:// or https:// URL', address);
  }

  return {
    logLevel: get<number>('log_level'),
    tracing: get<boolean>('tracing'),
    server: {
      listenAddr: get<string>('server.listen_addr'),
      maxRequestBodyBytes: bodyMb * MIB,
      bodyMode: get<'auto' | 'full_duplex' | 'buffered'>('server.body_mode'),
      metadataNamespace: get<string>('server.metadata_namespace'),
      shutdownTimeoutMs: get<number>('server.shutdown_timeout'),
      drainDelayMs,
      workers,
      metricsAddr: metricsAddress(get<string>('server.metrics_addr'), get<number | undefined>('server.metrics_port'), lookup(doc, 'server.metrics_addr') !== undefined || env[envName('server.metrics_addr')] !== undefined),
      streamedResponses: get<boolean>('server.streamed_responses'),
      streamIdleTimeoutMs: streamIdleMs,
      maxRequestHeaders,
      trustedClientHeaders: get<string>('server.trusted_client_headers')
        .split(',')
        .map((h) => h.trim().toLowerCase())
        .filter((h) => h !== ''),
      allowedPaths: get<string | undefined>('server.allowed_paths')
        ?.split(',')
        .map((p) => p.trim())
        .filter((p) => p !== ''),
      trustedOriginHeaders: get<string>('server.trusted_origin_headers')
        .split(',')
        .map((h) => h.trim().toLowerCase())
        .filter((h) => h !== ''),
      tls: parseTls(
        {
          cert: get<string | undefined>('server.tls_cert_file'),
          key: get<string | undefined>('server.tls_key_file'),
          ca: get<string | undefined>('server.tls_client_ca_file'),
          certPath: get<string | undefined>('server.cert_path'),
          secure: get<boolean | undefined>('server.secure_serving') ?? get<boolean | undefined>('server.secure_coordinator'),
          minVersion: get<string>('server.tls_min_version'),
          ciphers: get<string>('server.tls_cipher_suites'),
        },
        warnings,
      ),
      sessionLimits,
    },
    gateway: {
      address,
      timeoutMs: get<number>('gateway.timeout'),
      maxIdleConnsPerHost: get<number>('gateway.max_idle_conns_per_host'),
      idleConnTimeoutMs: get<number>('gateway.idle_conn_timeout'),
    },
    pipeline: {
      kvConnector: kv === '' ? undefined : kv,
      ecConnector: ec === '' ? undefined : ec,
      useOpenaiFormat: get<boolean>('pipeline.use_openai_format'),
      dpSize: get<number>('pipeline.dp_size'),
      kvConnectorParams: parseKvConnectorParams(pipelineDoc['kv_connector_params']),
      forwardResponseHeaders: parseList('pipeline.forward_response_headers', pipelineDoc['forward_response_headers']),
      requestLimits,
      steps: parseSteps(pipelineDoc['steps']),
    },
    warnings,
  };
}

/**
 * Upstream's loader (viper) matches keys case-insensitively, so `Server:` or `Log_Level:` work
 * there. Section keys, scalar keys and each step's own param keys are lower-cased here too (a
 * warning names each), so such a file loads the same; two spellings of one key are an error.
 */
function lowerCaseKeys(doc: Record<string, unknown>, warnings: string[]): Record<string, unknown> {
  const lower = (m: Record<string, unknown>, where: string, depth: number): Record<string, unknown> => {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(m)) {
      const key = k.toLowerCase();
      const path = where ? `${where}.${key}` : key;
      if (key in out) throw new ConfigError(path, 'one spelling of the key (keys are case-insensitive, as upstream)', k);
      if (key !== k) warnings.push(`key "${where ? `${where}.` : ''}${k}" read as "${path}" (keys are case-insensitive, as upstream)`);
      out[key] = depth > 0 && isMap(v) ? lower(v, path, depth - 1) : v;
    }
    if (where === 'pipeline' && Array.isArray(out['steps'])) {
      out['steps'] = (out['steps'] as unknown[]).map((step, i) => {
        if (!isMap(step)) return step;
        const s = lower(step, `pipeline.steps[${i}]`, 0);
        return isMap(s['params']) ? { ...s, params: lower(s['params'], `pipeline.steps[${i}].params`, 0) } : s;
      });
    }
    return out;
  };
  return lower(doc, '', 1);
}

/** A YAML list or nothing (a single string is a one-element list, as viper reads it). */
function parseList(key: string, raw: unknown): readonly unknown[] | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (typeof raw === 'string') return [raw];
  if (!Array.isArray(raw)) throw new ConfigError(key, 'a list', raw);
  return raw;
}

/** `pipeline.kv_connector_params`: a map or nothing; its keys are the connector's to judge. */
function parseKvConnectorParams(raw: unknown): Record<string, unknown> | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (!isMap(raw)) throw new ConfigError('pipeline.kv_connector_params', 'a map', raw);
  return Object.keys(raw).length === 0 ? undefined : raw;
}

/** Reads and parses a YAML config file; a missing or unparsable file is a {@link ConfigError}. */
export function loadConfig(path: string, env: NodeJS.ProcessEnv = process.env): AppConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError('--config', `a readable YAML file at ${path}`, (err as Error).message);
  }
  let doc: unknown;
  try {
    doc = yaml.load(text);
  } catch (err) {
    throw new ConfigError('--config', `valid YAML in ${path}`, (err as Error).message.split('\n')[0]);
  }
  return parseConfig(doc, env);
}
