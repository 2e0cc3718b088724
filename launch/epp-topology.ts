/**
 * The production topology without Kubernetes (docs/deploy-without-kubernetes.md): the three files a
 * launcher writes on a router node so that Envoy and the llm-d EPP (file discovery) serve the
 * encode / prefill / decode workers of a job, with epd-coordinator in front of the EPP.
 *
 * - the endpoints file: one entry per worker, its role in the `llm-d.ai/role` label;
 * - the EPP config: file discovery (`watchFile: false` by default), `header-profile-handler`, one
 *   scheduling profile per role, and the prefix-cache producer + scorer on decode (what makes a
 *   conditional decode a hit);
 * - the Envoy config: the public listener runs our ext_proc filter first and the EPP's second, in
 *   one filter chain, to an ORIGINAL_DST cluster (one Envoy hop for decode); side calls re-enter a
 *   gateway listener that has the EPP's filter alone; an admin listener for readiness; no request
 *   timeout; the path policy of envoy/ on the public port (launch/path-policy.ts: `/metrics` and
 *   every other path outside the allow-list is Envoy's 404); an access log with `upstream=` and
 *   `prefiller=` beside our dynamic metadata.
 *
 * Pure functions plus a CLI; an external launcher can call {@link writeTopology} or copy the output
 * of `npx tsx launch/epp-topology.ts --out DIR ...`. {@link readinessGate} is the job's readiness
 * check: Envoy admin `/ready` answers 200 and the EPP's `llm_d_epp_ready_endpoints` gauge counts
 * every endpoint.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { hostPort, renderEndpointsFile, renderEppConfig, TopologyError, type WorkerEndpoint, type WorkerRole } from './epp-files';
import { renderEnvoyConfig, type EnvoyConfigOptions } from './topology-envoy';

export {
  renderEndpointsFile,
  renderEppConfig,
  ROLE_LABEL,
  TopologyError,
  WORKER_ROLES,
  type EppConfigOptions,
  type WorkerEndpoint,
  type WorkerRole,
} from './epp-files';
export { accessLogFormat, parseAccessLogLine } from './topology-access-log';
export { renderEnvoyConfig, type EnvoyConfigOptions } from './topology-envoy';
export { readinessGate, readyEndpointsGauge, type ReadinessState } from './epp-readiness';

export interface TopologyFiles {
  readonly endpointsPath: string;
  readonly eppConfigPath: string;
  readonly envoyConfigPath: string;
}

export interface TopologyOptions {
  readonly endpoints: readonly WorkerEndpoint[];
  readonly envoy: Omit<EnvoyConfigOptions, 'accessLogPath'> & { readonly accessLogPath?: string };
  readonly watchFile?: boolean;
  readonly prefixCache?: boolean;
}

/** Writes `endpoints.yaml`, `epp.yaml` and `envoy.yaml` into `dir`. */
export function writeTopology(dir: string, opts: TopologyOptions): TopologyFiles {
  const abs = resolve(dir);
  mkdirSync(abs, { recursive: true });
  const files = {
    endpointsPath: join(abs, 'endpoints.yaml'),
    eppConfigPath: join(abs, 'epp.yaml'),
    envoyConfigPath: join(abs, 'envoy.yaml'),
  };
  writeFileSync(files.endpointsPath, renderEndpointsFile(opts.endpoints));
  writeFileSync(
    files.eppConfigPath,
    renderEppConfig({ endpointsPath: files.endpointsPath, watchFile: opts.watchFile, prefixCache: opts.prefixCache }),
  );
  writeFileSync(files.envoyConfigPath, renderEnvoyConfig({ accessLogPath: join(abs, 'access.log'), ...opts.envoy }));
  return files;
}

const USAGE = `usage: npx tsx launch/epp-topology.ts --out DIR [options]
  --encode NAME=IP:PORT     an encode worker (repeat for more)
  --prefill NAME=IP:PORT    a prefill worker (repeat)
  --decode NAME=IP:PORT     a decode worker (repeat)
  --public IP:PORT          client listener (0.0.0.0:8080)
  --gateway-port N          side-call listener on 127.0.0.1 (8081)
  --admin-port N            Envoy admin on 127.0.0.1 (19000)
  --async-port N            the async processor's entry on 127.0.0.1 (default: none)
  --coordinator IP:PORT     epd-coordinator gRPC (127.0.0.1:50051)
  --coordinator-workers N   its server.workers (1); above 1 Envoy caps streams per connection to it
  --epp IP:PORT             EPP ext_proc gRPC (127.0.0.1:9002)
  --access-log PATH         (DIR/access.log)
  --watch-file              EPP re-reads the endpoints file on change (default: off)
  --no-prefix-cache         no prefix-cache producer/scorer on decode (conditional decode always misses)
Writes DIR/endpoints.yaml, DIR/epp.yaml, DIR/envoy.yaml.`;

export function parseCliArgs(argv: readonly string[]): { dir: string; opts: TopologyOptions } {
  let dir: string | undefined;
  const endpoints: WorkerEndpoint[] = [];
  let pub = { host: '0.0.0.0', port: 8080 };
  const envoy = { gatewayPort: 8081, adminPort: 19000, coordinatorAddress: '127.0.0.1:50051', eppAddress: '127.0.0.1:9002' };
  let accessLogPath: string | undefined;
  let asyncPort: number | undefined;
  let coordinatorWorkers: number | undefined;
  let watchFile = false;
  let prefixCache = true;
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new TopologyError(`${flag} needs a value`);
      return v;
    };
    switch (flag) {
      case '--out':
        dir = value();
        break;
      case '--encode':
      case '--prefill':
      case '--decode': {
        const v = value();
        const eq = v.indexOf('=');
        if (eq <= 0) throw new TopologyError(`${flag}: expected NAME=IP:PORT, got ${JSON.stringify(v)}`);
        const hp = hostPort(flag, v.slice(eq + 1));
        endpoints.push({ name: v.slice(0, eq), role: flag.slice(2) as WorkerRole, address: hp.host, port: hp.port });
        break;
      }
      case '--public':
        pub = hostPort(flag, value());
        break;
      case '--gateway-port':
        envoy.gatewayPort = Number(value());
        break;
      case '--admin-port':
        envoy.adminPort = Number(value());
        break;
      case '--async-port':
        asyncPort = Number(value());
        break;
      case '--coordinator':
        envoy.coordinatorAddress = value();
        break;
      case '--epp':
        envoy.eppAddress = value();
        break;
      case '--coordinator-workers':
        coordinatorWorkers = Number(value());
        break;
      case '--access-log':
        accessLogPath = value();
        break;
      case '--watch-file':
        watchFile = true;
        break;
      case '--no-prefix-cache':
        prefixCache = false;
        break;
      default:
        throw new TopologyError(`unknown argument ${flag}\n${USAGE}`);
    }
  }
  if (!dir) throw new TopologyError(`--out is required\n${USAGE}`);
  if (endpoints.length === 0) throw new TopologyError(`name at least one worker (--encode/--prefill/--decode)\n${USAGE}`);
  return {
    dir,
    opts: {
      endpoints,
      watchFile,
      prefixCache,
      envoy: {
        ...envoy,
        publicAddress: pub.host,
        publicPort: pub.port,
        ...(accessLogPath ? { accessLogPath } : {}),
        ...(asyncPort !== undefined ? { asyncPort } : {}),
        ...(coordinatorWorkers !== undefined ? { coordinatorWorkers } : {}),
      },
    },
  };
}

if (require.main === module) {
  const argv = process.argv.slice(2);
  if (argv.includes('-h') || argv.includes('--help')) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  try {
    const { dir, opts } = parseCliArgs(argv);
    const files = writeTopology(dir, opts);
    process.stdout.write(`wrote ${files.endpointsPath}\nwrote ${files.eppConfigPath}\nwrote ${files.envoyConfigPath}\n`);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(2);
  }
}
