/**
 * Renders envoy/envoy.template.yaml into a runnable Envoy bootstrap.
 *
 * Used by the e2e harness, `npm run stack` and `npm run bench`, and as a CLI to regenerate the
 * committed default bootstraps (envoy/envoy.yaml, envoy/envoy-buffered.yaml).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join, resolve } from 'node:path';
import yaml from 'js-yaml';
import { MAX_WORKERS } from '../src/config/config';
import { processorMatches, renderCatchAllRoute, renderPublicRoutes } from './path-policy';
import {
  GRACEFUL_CLOSE,
  serviceMaxConcurrentStreams,
  serviceHealthChecks,
  serviceOutlierDetection,
  workerCommonHttpOptions,
  workerRetryPolicy,
} from './envoy-policy';

export type EnvoyBodyMode = 'full_duplex' | 'buffered';

export interface EnvoyBootstrapOptions {
  /** Client-facing listener (127.0.0.1). 0 lets the OS pick; read it back from the admin API. */
  readonly publicPort: number;
  /** Internal listener the coordinator's side calls re-enter (127.0.0.1). */
  readonly gatewayPort: number;
  readonly adminPort: number;
  /**
   * The async processor's entry (127.0.0.1): the pipeline's paths, and an ext_proc stream that tells
   * the coordinator so (gRPC metadata `x-epd-origin: async-processor`). Never expose it to clients.
   */
  readonly asyncPort: number;
  /** The coordinator's gRPC listener, `ip:port`. */
  readonly extProcAddress: string;
  /** Worker addresses by role, `ip:port` (Envoy STATIC clusters need IP literals). */
  readonly encodeAddress: string;
  readonly prefillAddress: string;
  readonly decodeAddress: string;
  readonly bodyMode: EnvoyBodyMode;
  /** File both listeners append their JSON access-log lines to. */
  readonly accessLogPath: string;
  /** TLS to the coordinator (its `server.tls_*` keys); unset = plaintext h2c. */
  readonly extProcTls?: ExtProcTlsOptions;
  /**
   * `max_requests_per_connection` of the coordinator cluster; 0 = none (a stock Envoy cluster).
   * Default 500, defence in depth only: the coordinator itself takes Envoy's per-stream resets.
   */
  readonly extProcStreamCap?: number;
  /** The service's `server.workers`: above 1, the cluster caps streams per connection so Envoy opens enough (launch/envoy-policy.ts). Default 1. */
  readonly extProcWorkers?: number;
  /**
   * The public listener without the path policy: one route sends every path to the coordinator
   * and decode, as an Envoy we did not render may. For tests of the service's own allow-list.
   */
  readonly catchAll?: boolean;
  /**
   * `envoy.reloadable_features.ext_proc_graceful_grpc_close` in the runtime layer. Default true;
   * false (written out, as Envoy's own default) for the suites that prove a stock Envoy.
   */
  readonly extProcGracefulClose?: boolean;
  /** grpc.health.v1 checks and outlier detection on the coordinator cluster. Default true. */
  readonly extProcHealthCheck?: boolean;
  /** Idle timeout below the workers' keep-alive and the retry of never-sent requests on the worker legs. Default true. */
  readonly workerConnectionPolicy?: boolean;
  /**
   * `enable_reuse_port` on every listener. Default true (Envoy's own: a socket per worker thread).
   * With it, a second Envoy on the same port binds without an error and silently takes a share of
   * the connections; the harnesses, which pick ports that may race, set false so a clash fails.
   */
  readonly reusePort?: boolean;
}

export interface ExtProcTlsOptions {
  /** CA bundle that signed the coordinator's certificate. */
  readonly caFile: string;
  /** Envoy's client certificate and key, for a coordinator that requires mTLS (`server.tls_client_ca_file`). */
  readonly certFile?: string;
  readonly keyFile?: string;
  /** SNI sent, and the DNS SAN the coordinator's certificate must carry. Default `localhost`. */
  readonly serverName?: string;
}

export const DEFAULT_ENVOY_BOOTSTRAP: EnvoyBootstrapOptions = {
  publicPort: 8080,
  gatewayPort: 8081,
  adminPort: 19000,
  asyncPort: 8084,
  extProcAddress: '127.0.0.1:50051',
  encodeAddress: '127.0.0.1:8100',
  prefillAddress: '127.0.0.1:8200',
  decodeAddress: '127.0.0.1:8300',
  bodyMode: 'full_duplex',
  accessLogPath: '/dev/stdout',
  extProcStreamCap: 500,
  extProcGracefulClose: true,
  extProcHealthCheck: true,
  workerConnectionPolicy: true,
  reusePort: true,
};

export const REPO_ROOT = resolve(__dirname, '..');
export const ENVOY_TEMPLATE_PATH = join(REPO_ROOT, 'envoy', 'envoy.template.yaml');
/** The committed renderings with default options, one per body mode. */
export const COMMITTED_BOOTSTRAPS: Readonly<Record<EnvoyBodyMode, string>> = {
  full_duplex: join(REPO_ROOT, 'envoy', 'envoy.yaml'),
  buffered: join(REPO_ROOT, 'envoy', 'envoy-buffered.yaml'),
};

/**
 * Envoy's stream buffer in buffered mode: the coordinator's default body limit (64 MiB) plus
 * headroom, so the coordinator (not Envoy) answers oversize bodies with its JSON 413.
 */
export const BUFFERED_BODY_LIMIT_BYTES = 80 * 1024 * 1024;
/** Envoy's own default; full duplex drains every chunk, so nothing larger is needed. */
const STREAMING_BODY_LIMIT_BYTES = 1024 * 1024;

export class EnvoyBootstrapError extends Error {
  override readonly name = 'EnvoyBootstrapError';
}

function checkPort(name: string, port: number): string {
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new EnvoyBootstrapError(`${name}: expected a port 0-65535, got ${String(port)}`);
  }
  return String(port);
}

/** Splits `ip:port` / `[ipv6]:port`; the host must be an IP literal and the port non-zero. */
export function parseHostPort(name: string, value: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(value);
  const host = m ? (m[1] ?? m[2] ?? '') : '';
  const port = m ? Number(m[3]) : NaN;
  if (!m || isIP(host) === 0 || port < 1 || port > 65535) {
    throw new EnvoyBootstrapError(`${name}: expected "ip:port" with an IP literal, got ${JSON.stringify(value)}`);
  }
  return { host, port };
}

function checkPath(path: string, name = 'accessLogPath'): string {
  // The path lands inside a double-quoted YAML scalar.
  if (path.length === 0 || /["\\\n\r\0]/.test(path)) {
    throw new EnvoyBootstrapError(`${name}: expected a plain file path, got ${JSON.stringify(path)}`);
  }
  return path;
}

const PLAINTEXT_EXTPROC =
  '    # Plaintext h2c. For TLS or mTLS to the coordinator, render with --ext-proc-ca (and --ext-proc-client-cert/-key).';

/** The epd_coordinator cluster's upstream TLS context (ALPN h2: the coordinator speaks gRPC only). */
function extProcTransportSocket(tls: ExtProcTlsOptions | undefined): string {
  if (!tls) return PLAINTEXT_EXTPROC;
  if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
    throw new EnvoyBootstrapError('extProcTls: expected both certFile and keyFile, or neither');
  }
  const name = tls.serverName ?? 'localhost';
  if (!/^[A-Za-z0-9.-]{1,253}$/.test(name))
    throw new EnvoyBootstrapError(`extProcTls.serverName: expected a DNS name, got ${JSON.stringify(name)}`);
  const lines = [
    '    transport_socket:',
    '      name: envoy.transport_sockets.tls',
    '      typed_config:',
    '        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext',
    `        sni: ${name}`,
    '        common_tls_context:',
    '          alpn_protocols: [h2]',
    '          validation_context:',
    `            trusted_ca: { filename: "${checkPath(tls.caFile, 'extProcTls.caFile')}" }`,
    `            match_typed_subject_alt_names: [{ san_type: DNS, matcher: { exact: "${name}" } }]`,
  ];
  if (tls.certFile !== undefined && tls.keyFile !== undefined) {
    lines.push(
      '          tls_certificates:',
      `          - certificate_chain: { filename: "${checkPath(tls.certFile, 'extProcTls.certFile')}" }`,
      `            private_key: { filename: "${checkPath(tls.keyFile, 'extProcTls.keyFile')}" }`,
    );
  }
  return lines.join('\n');
}

/** The coordinator cluster's stream cap, or a comment saying there is none. */
function extProcStreamCap(cap: number | undefined): string {
  if (cap === undefined || cap === 0) {
    return '        # No max_requests_per_connection: one connection carries any number of ext_proc streams.';
  }
  if (!Number.isInteger(cap) || cap < 0 || cap > 2 ** 32 - 1)
    throw new EnvoyBootstrapError(`extProcStreamCap: expected an integer >= 0, got ${String(cap)}`);
  return [
    '        # Defence in depth only, not needed: Envoy resets every ext_proc stream when done with it, and',
    '        # the coordinator raises its HTTP/2 stream-reset budget (server.stream_reset_burst/rate) so that',
    '        # a session is never closed for it; a stock Envoy cluster without this cap is safe. Rotating',
    "        # connections also spreads the streams over the coordinator's replicas.",
    '        common_http_protocol_options:',
    `          max_requests_per_connection: ${cap}`,
  ].join('\n');
}

/** The streams-per-connection cap of a multi-process service, or a comment saying when it is needed. */
function extProcMaxConcurrentStreams(workers: number | undefined): string {
  if (workers !== undefined && (!Number.isInteger(workers) || workers < 1 || workers > MAX_WORKERS))
    throw new EnvoyBootstrapError(`extProcWorkers: expected an integer 1-${MAX_WORKERS}, got ${String(workers)}`);
  const cap = serviceMaxConcurrentStreams(workers);
  if (cap === undefined)
    return '            # server.workers > 1 needs max_concurrent_streams here (--ext-proc-workers N renders it; docs/operations.md).';
  return [
    `            # server.workers ${workers}: a connection per ${cap} concurrent streams, dealt out to the service's worker`,
    "            # processes in turn (launch/envoy-policy.ts). Unset, Envoy's one connection feeds one worker.",
    `            max_concurrent_streams: ${cap}`,
  ].join('\n');
}

/** `obj` as block YAML, every line indented by `indent`. */
function yamlLines(indent: string, obj: unknown): string {
  return yaml
    .dump(obj, { lineWidth: 200 })
    .trimEnd()
    .split('\n')
    .map((l) => indent + l)
    .join('\n');
}

/** The settings of launch/envoy-policy.ts, or a comment saying which are off. */
function policyPlaceholders(o: EnvoyBootstrapOptions): Record<string, string> {
  const graceful = o.extProcGracefulClose ?? true;
  const workers = o.workerConnectionPolicy ?? true;
  return {
    GRACEFUL_CLOSE_RUNTIME: `      ${GRACEFUL_CLOSE.runtimeKey}: ${String(graceful)}`,
    WORKER_RETRY_POLICY: workers
      ? yamlLines('              ', { retry_policy: workerRetryPolicy() })
      : '              # No retry policy (workerConnectionPolicy off).',
    WORKER_PROTOCOL_OPTIONS: workers
      ? yamlLines('    ', {
          typed_extension_protocol_options: {
            'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
              '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
              common_http_protocol_options: workerCommonHttpOptions(),
              explicit_http_config: { http_protocol_options: {} },
            },
          },
        })
      : "    # Envoy's default idle timeout (1 h; workerConnectionPolicy off).",
    EXTPROC_HEALTH:
      (o.extProcHealthCheck ?? true)
        ? [
            '    # The readiness service: a draining replica turns NOT_SERVING and Envoy stops opening streams',
            '    # to it while it still accepts them (server.drain_delay covers the detection time).',
            yamlLines('    ', { health_checks: serviceHealthChecks(), outlier_detection: serviceOutlierDetection() }),
          ].join('\n')
        : '    # No health check (extProcHealthCheck off): one endpoint, always used.',
  };
}

function placeholders(o: EnvoyBootstrapOptions): Record<string, string> {
  const ext = parseHostPort('extProcAddress', o.extProcAddress);
  const enc = parseHostPort('encodeAddress', o.encodeAddress);
  const pre = parseHostPort('prefillAddress', o.prefillAddress);
  const dec = parseHostPort('decodeAddress', o.decodeAddress);
  const buffered = o.bodyMode === 'buffered';
  if (o.bodyMode !== 'buffered' && o.bodyMode !== 'full_duplex') {
    throw new EnvoyBootstrapError(`bodyMode: expected full_duplex or buffered, got ${JSON.stringify(o.bodyMode)}`);
  }
  return {
    BODY_MODE: buffered ? 'BUFFERED' : 'FULL_DUPLEX_STREAMED',
    PUBLIC_PORT: checkPort('publicPort', o.publicPort),
    GATEWAY_PORT: checkPort('gatewayPort', o.gatewayPort),
    ADMIN_PORT: checkPort('adminPort', o.adminPort),
    ASYNC_PORT: checkPort('asyncPort', o.asyncPort),
    REUSE_PORT: String(o.reusePort ?? true),
    EXTPROC_HOST: ext.host,
    EXTPROC_PORT: String(ext.port),
    ENCODE_HOST: enc.host,
    ENCODE_PORT: String(enc.port),
    PREFILL_HOST: pre.host,
    PREFILL_PORT: String(pre.port),
    DECODE_HOST: dec.host,
    DECODE_PORT: String(dec.port),
    REQUEST_BODY_MODE: buffered ? 'BUFFERED' : 'FULL_DUPLEX_STREAMED',
    // FULL_DUPLEX_STREAMED requires trailers SEND; buffered mode does not need them.
    REQUEST_TRAILER_MODE: buffered ? 'SKIP' : 'SEND',
    PUBLIC_ROUTES: (o.catchAll ? renderCatchAllRoute : renderPublicRoutes)(
      '              ',
      String(buffered ? BUFFERED_BODY_LIMIT_BYTES : STREAMING_BODY_LIMIT_BYTES),
    ),
    ASYNC_ROUTES: renderPublicRoutes(
      '              ',
      String(buffered ? BUFFERED_BODY_LIMIT_BYTES : STREAMING_BODY_LIMIT_BYTES),
      processorMatches(),
    ),
    ACCESS_LOG_PATH: checkPath(o.accessLogPath),
    EXTPROC_TRANSPORT_SOCKET: extProcTransportSocket(o.extProcTls),
    EXTPROC_STREAM_CAP: extProcStreamCap(o.extProcStreamCap),
    EXTPROC_MAX_CONCURRENT_STREAMS: extProcMaxConcurrentStreams(o.extProcWorkers),
    ...policyPlaceholders(o),
  };
}

/** Fills every placeholder; an unknown or unused placeholder is a template bug and throws. */
export function renderTemplate(template: string, values: Record<string, string>): string {
  const used = new Set<string>();
  const out = template.replace(/\{\{([A-Z_]+)\}\}/g, (_m, name: string) => {
    const v = values[name];
    if (v === undefined) throw new EnvoyBootstrapError(`template placeholder {{${name}}} has no value`);
    used.add(name);
    return v;
  });
  const unused = Object.keys(values).filter((k) => !used.has(k));
  if (unused.length > 0) throw new EnvoyBootstrapError(`template does not use: ${unused.join(', ')}`);
  return out;
}

export function renderEnvoyBootstrap(opts: Partial<EnvoyBootstrapOptions> = {}): string {
  const o: EnvoyBootstrapOptions = { ...DEFAULT_ENVOY_BOOTSTRAP, ...opts };
  return renderTemplate(readFileSync(ENVOY_TEMPLATE_PATH, 'utf8'), placeholders(o));
}

const USAGE = `usage: npx tsx launch/envoy-bootstrap.ts [options]
  --write-defaults         rewrite envoy/envoy.yaml and envoy/envoy-buffered.yaml
  --out FILE               write the rendering to FILE (default: stdout)
  --buffered               BUFFERED request bodies (default: FULL_DUPLEX_STREAMED)
  --public-port N          (8080)     --gateway-port N   (8081)     --admin-port N (19000)
  --async-port N           (8084)     the async processor's entry
  --ext-proc IP:PORT       (127.0.0.1:50051)
  --encode IP:PORT         (127.0.0.1:8100)
  --prefill IP:PORT        (127.0.0.1:8200)
  --decode IP:PORT         (127.0.0.1:8300)
  --access-log PATH        (/dev/stdout)
  --ext-proc-ca FILE       TLS to the coordinator, trusting this CA (default: plaintext h2c)
  --ext-proc-client-cert FILE, --ext-proc-client-key FILE   Envoy's certificate for mTLS
  --ext-proc-sni NAME      (localhost)
  --ext-proc-stream-cap N  max_requests_per_connection of the coordinator cluster (500, defence in depth; 0 = none)
  --ext-proc-workers N     the coordinator's server.workers (1); above 1 caps streams per connection`;

function parseArgs(argv: string[]): { opts: Partial<EnvoyBootstrapOptions>; out?: string; writeDefaults: boolean } {
  const opts: { -readonly [K in keyof EnvoyBootstrapOptions]?: EnvoyBootstrapOptions[K] } = {};
  let out: string | undefined;
  let writeDefaults = false;
  const tls: { caFile?: string; certFile?: string; keyFile?: string; serverName?: string } = {};
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new EnvoyBootstrapError(`${flag} needs a value`);
      return v;
    };
    switch (flag) {
      case '--write-defaults':
        writeDefaults = true;
        break;
      case '--out':
        out = value();
        break;
      case '--buffered':
        opts.bodyMode = 'buffered';
        break;
      case '--public-port':
        opts.publicPort = Number(value());
        break;
      case '--gateway-port':
        opts.gatewayPort = Number(value());
        break;
      case '--admin-port':
        opts.adminPort = Number(value());
        break;
      case '--async-port':
        opts.asyncPort = Number(value());
        break;
      case '--ext-proc':
        opts.extProcAddress = value();
        break;
      case '--encode':
        opts.encodeAddress = value();
        break;
      case '--prefill':
        opts.prefillAddress = value();
        break;
      case '--decode':
        opts.decodeAddress = value();
        break;
      case '--access-log':
        opts.accessLogPath = value();
        break;
      case '--ext-proc-ca':
        tls.caFile = value();
        break;
      case '--ext-proc-client-cert':
        tls.certFile = value();
        break;
      case '--ext-proc-client-key':
        tls.keyFile = value();
        break;
      case '--ext-proc-sni':
        tls.serverName = value();
        break;
      case '--ext-proc-stream-cap':
        opts.extProcStreamCap = Number(value());
        break;
      case '--ext-proc-workers':
        opts.extProcWorkers = Number(value());
        break;
      case '-h':
      case '--help':
        process.stdout.write(USAGE + '\n');
        return process.exit(0);
      default:
        throw new EnvoyBootstrapError(`unknown argument ${flag}\n${USAGE}`);
    }
  }
  if (tls.caFile !== undefined) opts.extProcTls = { ...tls, caFile: tls.caFile };
  else if (Object.keys(tls).length > 0)
    throw new EnvoyBootstrapError('--ext-proc-client-cert, --ext-proc-client-key and --ext-proc-sni need --ext-proc-ca');
  return { opts, out, writeDefaults };
}

if (require.main === module) {
  try {
    const { opts, out, writeDefaults } = parseArgs(process.argv.slice(2));
    if (writeDefaults) {
      for (const [mode, file] of Object.entries(COMMITTED_BOOTSTRAPS)) {
        writeFileSync(file, renderEnvoyBootstrap({ bodyMode: mode as EnvoyBodyMode }));
        process.stdout.write(`wrote ${file}\n`);
      }
    } else if (out) {
      writeFileSync(out, renderEnvoyBootstrap(opts));
    } else {
      process.stdout.write(renderEnvoyBootstrap(opts));
    }
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(2);
  }
}
