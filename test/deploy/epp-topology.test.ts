/**
 * The no-Kubernetes topology generator (launch/epp-topology.ts, docs/deploy-without-kubernetes.md):
 * the three files as a launcher gets them, Envoy accepting its file, and the readiness gate's parse.
 * Running them against the real EPP is test/peers/ (needs PEERS_BIN).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yaml from 'js-yaml';
import {
  accessLogFormat,
  parseAccessLogLine,
  parseCliArgs,
  readyEndpointsGauge,
  renderEndpointsFile,
  renderEnvoyConfig,
  renderEppConfig,
  TopologyError,
  writeTopology,
  type TopologyOptions,
} from '../../launch/epp-topology';
import { ensureEnvoy } from '../../launch/envoy';
import {
  GRACEFUL_CLOSE,
  SERVICE_HEALTH_CHECK,
  WORKER_IDLE_TIMEOUT_SECONDS,
  WORKER_KEEPALIVE_SECONDS,
  WORKER_RETRY,
  WORKER_STREAMS_PER_CONNECTION,
} from '../../launch/envoy-policy';
import { envoyValidate } from './envoy-validate';
import { allowedMatches } from '../../launch/path-policy';
import { PIPELINE_PATHS, REFUSED_PATH_BODY } from '../../src/pipeline/path-policy';

type Json = Record<string, any>;

const OPTS: TopologyOptions = {
  endpoints: [
    { name: 'enc-0', role: 'encode', address: '10.0.0.11', port: 8000 },
    { name: 'pre-0', role: 'prefill', address: '10.0.0.12', port: 8000, labels: { job: 'slurm-42' } },
    { name: 'dec-0', role: 'decode', address: '10.0.0.13', port: 8000 },
  ],
  envoy: {
    publicAddress: '0.0.0.0',
    publicPort: 8080,
    gatewayPort: 8081,
    adminPort: 19000,
    coordinatorAddress: '127.0.0.1:50051',
    eppAddress: '127.0.0.1:9002',
  },
};

let envoyBin: string | undefined;
try {
  envoyBin = ensureEnvoy();
} catch {
  envoyBin = undefined;
}

describe('no-Kubernetes topology files (launch/epp-topology.ts)', () => {
  let dir: string;
  let envoy: Json;
  let epp: Json;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'epd-topology-'));
    const files = writeTopology(dir, OPTS);
    envoy = yaml.load(readFileSync(files.envoyConfigPath, 'utf8')) as Json;
    epp = yaml.load(readFileSync(files.eppConfigPath, 'utf8')) as Json;
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const hcm = (listener: string): Json =>
    (envoy['static_resources']['listeners'] as Json[]).find((l) => l['name'] === listener)!['filter_chains'][0]['filters'][0][
      'typed_config'
    ];

  test('endpoints file: one entry per worker, the role as the llm-d.ai/role label, ports as strings', () => {
    const doc = yaml.load(readFileSync(join(dir, 'endpoints.yaml'), 'utf8')) as Json;
    expect(doc['endpoints']).toEqual([
      { name: 'enc-0', address: '10.0.0.11', port: '8000', labels: { 'llm-d.ai/role': 'encode' } },
      { name: 'pre-0', address: '10.0.0.12', port: '8000', labels: { job: 'slurm-42', 'llm-d.ai/role': 'prefill' } },
      { name: 'dec-0', address: '10.0.0.13', port: '8000', labels: { 'llm-d.ai/role': 'decode' } },
    ]);
  });

  test('endpoints file: refuses duplicate names, non-IPv4 addresses and a role smuggled in as a label', () => {
    const e = OPTS.endpoints[0]!;
    expect(() => renderEndpointsFile([e, e])).toThrow(TopologyError);
    expect(() => renderEndpointsFile([{ ...e, address: 'worker.example' }])).toThrow(/IPv4/);
    expect(() => renderEndpointsFile([{ ...e, labels: { 'llm-d.ai/role': 'decode' } }])).toThrow(/comes from role/);
  });

  test('EPP config: file discovery with watchFile false by default, header-profile-handler, a profile per role, prefix cache on decode', () => {
    const file = (epp['plugins'] as Json[]).find((p) => p['type'] === 'file-discovery')!;
    expect(file['parameters']).toEqual({ path: join(dir, 'endpoints.yaml'), watchFile: false });
    expect(epp['dataLayer']).toEqual({ discovery: { pluginRef: 'file-discovery' } });
    expect((epp['plugins'] as Json[]).find((p) => p['type'] === 'header-profile-handler')!['parameters']).toEqual({
      headerName: 'epp-profile',
      defaultProfile: 'decode',
    });
    const profiles = Object.fromEntries(
      (epp['schedulingProfiles'] as Json[]).map((p) => [p['name'], (p['plugins'] as Json[]).map((x) => x['pluginRef'])]),
    );
    expect(profiles).toEqual({
      encode: ['encode-filter', 'max-score-picker'],
      prefill: ['prefill-filter', 'queue-scorer', 'max-score-picker'],
      decode: ['decode-filter', 'queue-scorer', 'prefix-cache-scorer', 'max-score-picker'],
    });
    const plain = yaml.load(renderEppConfig({ endpointsPath: '/e.yaml', watchFile: true, prefixCache: false })) as Json;
    expect((plain['plugins'] as Json[]).map((p) => p['type'])).not.toContain('approx-prefix-cache-producer');
    expect((plain['plugins'] as Json[]).find((p) => p['type'] === 'file-discovery')!['parameters']['watchFile']).toBe(true);
  });

  test("Envoy public listener: strip client routing headers, then our filter, then the EPP's, in one chain to ORIGINAL_DST", () => {
    const pub = hcm('public');
    expect((pub['http_filters'] as Json[]).map((f) => f['name'])).toEqual([
      'strip-routing-headers',
      'epd-coordinator',
      'epp.ext_proc',
      'envoy.filters.http.router',
    ]);
    const stripped = (pub['http_filters'][0]['typed_config']['mutations']['request_mutations'] as Json[]).map((m) => m['remove']);
    expect(stripped).toEqual(expect.arrayContaining(['epp-profile', 'x-gateway-destination-endpoint', 'prefer', 'x-llm-d-pin-host-port']));
    const routes = pub['route_config']['virtual_hosts'][0]['routes'] as Json[];
    // The path policy of envoy/: the allow-list of src/pipeline/path-policy.ts, then Envoy's own 404
    // for everything else, with neither ext_proc filter running.
    const allowed = routes.slice(0, -1);
    expect(allowed.map((r) => r['match'])).toEqual(allowedMatches());
    // No request timeout anywhere on the way to the model.
    for (const r of allowed) expect(r['route']).toEqual({ cluster: 'original_destination_cluster', timeout: '0s' });
    const refused = routes[routes.length - 1]!;
    expect(refused).toMatchObject({ match: { prefix: '/' }, direct_response: { status: 404, body: { inline_string: REFUSED_PATH_BODY } } });
    expect(Object.keys(refused['typed_per_filter_config'])).toEqual(['epd-coordinator', 'epp.ext_proc']);
    expect(pub['request_timeout']).toBe('0s');
    const odst = (envoy['static_resources']['clusters'] as Json[]).find((c) => c['name'] === 'original_destination_cluster')!;
    expect(odst).toMatchObject({
      type: 'ORIGINAL_DST',
      lb_policy: 'CLUSTER_PROVIDED',
      original_dst_lb_config: { use_http_header: true, http_header_name: 'x-gateway-destination-endpoint' },
    });
  });

  test("Envoy async listener (llm-d-async's entry): only with asyncPort; loopback; the public chain for the pipeline's paths; our streams carry the processor origin", () => {
    const listeners = (doc: Json): Json[] => doc['static_resources']['listeners'] as Json[];
    expect(listeners(envoy).map((l) => l['name'])).toEqual(['public', 'gateway']);
    const withAsync = yaml.load(renderEnvoyConfig({ ...OPTS.envoy, accessLogPath: '/dev/stdout', asyncPort: 8084 })) as Json;
    const entry = listeners(withAsync).find((l) => l['name'] === 'async')!;
    expect(entry['address']['socket_address']).toEqual({ address: '127.0.0.1', port_value: 8084 });
    const h = entry['filter_chains'][0]['filters'][0]['typed_config'];
    expect((h['http_filters'] as Json[]).map((f) => f['name'])).toEqual([
      'strip-routing-headers',
      'epd-coordinator',
      'epp.ext_proc',
      'envoy.filters.http.router',
    ]);
    expect(h['http_filters'][1]['typed_config']['grpc_service']['initial_metadata']).toEqual([
      { key: 'x-epd-origin', value: 'async-processor' },
    ]);
    // The public listener's streams never carry it.
    const pub = listeners(withAsync).find((l) => l['name'] === 'public')!['filter_chains'][0]['filters'][0]['typed_config'];
    expect(pub['http_filters'][1]['typed_config']['grpc_service']['initial_metadata']).toBeUndefined();
    const routes = h['route_config']['virtual_hosts'][0]['routes'] as Json[];
    expect(routes.slice(0, -1).map((r) => r['match'])).toEqual(PIPELINE_PATHS.map((path) => ({ path })));
    expect(routes[routes.length - 1]).toMatchObject({ match: { prefix: '/' }, direct_response: { status: 404 } });
  });

  test("Envoy gateway listener (side calls): the EPP's filter alone, loopback, 400 without epp-profile", () => {
    const gw = (envoy['static_resources']['listeners'] as Json[]).find((l) => l['name'] === 'gateway')!;
    expect(gw['address']['socket_address']['address']).toBe('127.0.0.1');
    const h = hcm('gateway');
    expect((h['http_filters'] as Json[]).map((f) => f['name'])).toEqual(['epp.ext_proc', 'envoy.filters.http.router']);
    const routes = h['route_config']['virtual_hosts'][0]['routes'] as Json[];
    expect(routes[0]['route']['cluster']).toBe('original_destination_cluster');
    expect(routes[1]).toMatchObject({ direct_response: { status: 400 } });
    expect(envoy['admin']['address']['socket_address']).toEqual({ address: '127.0.0.1', port_value: 19000 });
  });

  test('Envoy proxy listener (the Go coordinator behind Envoy, as the compare bench runs it): only when asked; loopback; no ext_proc filter; every path to its own cluster', () => {
    expect((envoy['static_resources']['listeners'] as Json[]).map((l) => l['name'])).not.toContain('go');
    const doc = yaml.load(
      renderEnvoyConfig({
        ...OPTS.envoy,
        accessLogPath: '/dev/null',
        proxyListeners: [{ name: 'go', port: 8090, address: '127.0.0.1:8091' }],
      }),
    ) as Json;
    const go = (doc['static_resources']['listeners'] as Json[]).find((l) => l['name'] === 'go')!;
    expect(go['address']['socket_address']).toEqual({ address: '127.0.0.1', port_value: 8090 });
    const h = go['filter_chains'][0]['filters'][0]['typed_config'] as Json;
    expect((h['http_filters'] as Json[]).map((f) => f['name'])).toEqual(['envoy.filters.http.router']);
    expect(h['route_config']['virtual_hosts'][0]['routes']).toEqual([
      { match: { prefix: '/' }, route: { cluster: 'proxy_go', timeout: '0s' } },
    ]);
    const cluster = (doc['static_resources']['clusters'] as Json[]).find((c) => c['name'] === 'proxy_go')!;
    expect(cluster['load_assignment']['endpoints'][0]['lb_endpoints'][0]['endpoint']['address']['socket_address']).toEqual({
      address: '127.0.0.1',
      port_value: 8091,
    });
    expect(() =>
      renderEnvoyConfig({
        ...OPTS.envoy,
        accessLogPath: '/dev/null',
        proxyListeners: [{ name: 'go', port: 8090, address: 'localhost:1' }],
      }),
    ).toThrow(TopologyError);
  });

  test('the policy of launch/envoy-policy.ts: graceful ext_proc close, never-sent retries on every listener, worker idle timeout, health-checked coordinator', () => {
    const layers = envoy['layered_runtime']['layers'] as Json[];
    expect(layers.map((l) => l['static_layer'][GRACEFUL_CLOSE.runtimeKey])).toEqual([true]);
    for (const listener of ['public', 'gateway']) {
      const vhost = hcm(listener)['route_config']['virtual_hosts'][0];
      expect({ listener, retry: vhost['retry_policy'] }).toEqual({
        listener,
        retry: { retry_on: WORKER_RETRY.retryOn.join(','), num_retries: WORKER_RETRY.numRetries },
      });
    }
    const clusters = envoy['static_resources']['clusters'] as Json[];
    const workers = clusters.find((c) => c['type'] === 'ORIGINAL_DST')!;
    const opts = workers['typed_extension_protocol_options']['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
    expect(opts['common_http_protocol_options']).toEqual({ idle_timeout: `${WORKER_IDLE_TIMEOUT_SECONDS}s` });
    expect(WORKER_IDLE_TIMEOUT_SECONDS).toBeLessThan(Math.min(...Object.values(WORKER_KEEPALIVE_SECONDS)));
    const coordinator = clusters.find((c) => c['name'] === 'epd_coordinator')!;
    expect(coordinator['health_checks'][0]).toMatchObject({
      interval: `${SERVICE_HEALTH_CHECK.intervalSeconds}s`,
      grpc_health_check: { service_name: SERVICE_HEALTH_CHECK.service },
    });
  });

  test("coordinatorHealthCheck false (a coordinator with no health service: the compare bench's Node floor) drops only the health check", () => {
    const coordinatorOf = (doc: Json) => (doc['static_resources']['clusters'] as Json[]).find((x) => x['name'] === 'epd_coordinator')!;
    const bare = coordinatorOf(
      yaml.load(renderEnvoyConfig({ ...OPTS.envoy, accessLogPath: '/dev/stdout', coordinatorHealthCheck: false })) as Json,
    );
    const shipped = coordinatorOf(envoy);
    expect(bare['health_checks']).toBeUndefined();
    expect(shipped['health_checks']).toHaveLength(1);
    const { health_checks: _dropped, ...rest } = shipped;
    expect(bare).toEqual(rest);
  });

  test('coordinatorWorkers > 1 caps the streams per connection to the coordinator (Envoy then opens one per few streams); 1 or unset leaves no cap', () => {
    const h2Of = (doc: Json) => {
      const c = (doc['static_resources']['clusters'] as Json[]).find((x) => x['name'] === 'epd_coordinator')!;
      return c['typed_extension_protocol_options']['envoy.extensions.upstreams.http.v3.HttpProtocolOptions']['explicit_http_config'][
        'http2_protocol_options'
      ];
    };
    expect(h2Of(envoy)['max_concurrent_streams']).toBeUndefined();
    const render = (coordinatorWorkers: number) =>
      yaml.load(renderEnvoyConfig({ ...OPTS.envoy, accessLogPath: '/dev/stdout', coordinatorWorkers })) as Json;
    expect(h2Of(render(1))['max_concurrent_streams']).toBeUndefined();
    expect(h2Of(render(2))['max_concurrent_streams']).toBe(WORKER_STREAMS_PER_CONNECTION);
    expect(() => render(0)).toThrow('coordinatorWorkers: expected an integer 1-64, got 0');
    expect(parseCliArgs(['--out', 'x', '--decode', 'd=127.0.0.1:8300', '--coordinator-workers', '3']).opts.envoy.coordinatorWorkers).toBe(
      3,
    );
  });

  test('access log: upstream= and prefiller= on both listeners, our dynamic metadata on the public one, and it parses back', () => {
    for (const l of ['public', 'gateway']) {
      const fmt = hcm(l)['access_log'][0]['typed_config']['log_format']['text_format_source']['inline_string'] as string;
      expect(fmt).toBe(accessLogFormat(l as 'public' | 'gateway'));
      expect(fmt).toContain('upstream=%UPSTREAM_HOST%');
      expect(fmt).toContain('prefiller=%REQ(X-PREFILLER-HOST-PORT?X-LLM-D-PIN-HOST-PORT)%');
    }
    expect(accessLogFormat('public')).toContain('path_taken=%DYNAMIC_METADATA(epd.coordinator:path_taken)%');
    expect(accessLogFormat('gateway')).not.toContain('DYNAMIC_METADATA');
    const line =
      '[envoy] listener=gateway start=2026-12-01T10:00:00.000Z method=POST path=/v1/chat/completions code=412 upstream=- prefiller=- epp-profile=decode id=r-1 dur=3';
    expect(parseAccessLogLine(line)).toMatchObject({ listener: 'gateway', code: '412', upstream: '-', 'epp-profile': 'decode', id: 'r-1' });
    expect(parseAccessLogLine('[2026-12-01 ...][info] something else')).toBeNull();
  });

  test('readiness gauge: llm_d_epp_ready_endpoints summed over label sets; absent is undefined', () => {
    const text =
      '# HELP llm_d_epp_ready_endpoints x\n# TYPE llm_d_epp_ready_endpoints gauge\nllm_d_epp_ready_endpoints{name="local-epd"} 3\ninference_pool_ready_pods{name="local-epd"} 3\n';
    expect(readyEndpointsGauge(text)).toBe(3);
    expect(readyEndpointsGauge('inference_pool_ready_pods 3\n')).toBeUndefined();
  });

  test('CLI arguments: workers by role, and refusal of a missing --out or a bad address', () => {
    const { dir: out, opts } = parseCliArgs([
      '--out',
      '/tmp/x',
      '--decode',
      'dec-0=10.0.0.13:8000',
      '--epp',
      '127.0.0.1:9102',
      '--watch-file',
    ]);
    expect(out).toBe('/tmp/x');
    expect(opts.endpoints).toEqual([{ name: 'dec-0', role: 'decode', address: '10.0.0.13', port: 8000 }]);
    expect(opts.envoy.eppAddress).toBe('127.0.0.1:9102');
    expect(opts.watchFile).toBe(true);
    expect(() => parseCliArgs(['--decode', 'd=10.0.0.1:1'])).toThrow(/--out/);
    expect(() => parseCliArgs(['--out', '/x', '--decode', 'd=host:1'])).toThrow(/ipv4:port/);
  });

  test('docs/deploy-without-kubernetes.md shows the three files exactly as the generator writes them', () => {
    const doc = readFileSync(join(__dirname, '..', '..', 'docs', 'deploy-without-kubernetes.md'), 'utf8');
    const shown = (file: string): string => {
      const m = new RegExp('### `' + file + '`\\n\\n```yaml\\n([\\s\\S]*?)```').exec(doc);
      return m ? m[1]! : `(no ${file} block)`;
    };
    const { opts } = parseCliArgs(
      '--out /run/epd --encode vllm-e-0=10.0.0.11:8000 --prefill vllm-p-0=10.0.0.12:8000 --decode vllm-d-0=10.0.0.13:8000 --decode vllm-d-1=10.0.0.14:8000 --access-log /dev/stdout'.split(
        ' ',
      ),
    );
    expect(shown('endpoints.yaml')).toBe(renderEndpointsFile(opts.endpoints));
    expect(shown('epp.yaml')).toBe(renderEppConfig({ endpointsPath: '/run/epd/endpoints.yaml', watchFile: false }));
    expect(shown('envoy.yaml')).toBe(renderEnvoyConfig({ ...opts.envoy, accessLogPath: '/dev/stdout' }));
  });

  const validateTitle = 'Envoy accepts the generated Envoy config (envoy --mode validate)';
  (envoyBin ? test : test.skip)(envoyBin ? validateTitle : `${validateTitle} (skipped: no Envoy binary)`, () => {
    // The default files, and the Envoy config with the async processor's entry.
    writeFileSync(
      join(dir, 'envoy-async.yaml'),
      renderEnvoyConfig({ ...OPTS.envoy, accessLogPath: join(dir, 'access.log'), asyncPort: 8084 }),
    );
    writeFileSync(
      join(dir, 'envoy-proxy.yaml'),
      renderEnvoyConfig({
        ...OPTS.envoy,
        accessLogPath: join(dir, 'access.log'),
        proxyListeners: [{ name: 'go', port: 8090, address: '127.0.0.1:8091' }],
      }),
    );
    for (const file of ['envoy.yaml', 'envoy-async.yaml', 'envoy-proxy.yaml']) {
      const { status, log } = envoyValidate(envoyBin!, join(dir, file), 'warn');
      // Warnings (deprecated fields) count as failures too: the file is meant to be copied as it is.
      expect({ file, status, out: log }).toEqual({
        file,
        status: 0,
        out: expect.not.stringMatching(/\]\[(warning|error|critical)\]/),
      });
    }
  });
});
