/**
 * faults/stock-envoy.test.ts again, with what Envoy Gateway makes of config/k8s: the ext_proc filter
 * and the coordinator cluster exactly as `egctl x translate` renders them (processing mode, timeouts,
 * fail-closed, HTTP/2 windows, circuit breakers), less `maxRequestsPerConnection` (defence in depth
 * in the manifests, absent from a stock Envoy cluster), grafted onto the shipped bootstrap in place
 * of its own filter and cluster. The cluster keeps the name `epd_coordinator` so the stats read the
 * same, and loses its gRPC health check, whose own connection would blur the one-connection count.
 *
 * Needs .tools/bin/egctl (config/k8s/verify-egctl.sh; `npm test` builds it where Go is present).
 * Envoy Gateway's EnvoyExtensionPolicy is full duplex only, so only that body mode runs here.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import yaml from 'js-yaml';
import { countStatuses } from './support/load';
import { GRACEFUL_CLOSE } from '../../launch/envoy-policy';
import { TestClient } from '../../launch/client';
import {
  EGCTL,
  TRANSLATE_NAMESPACE,
  staticBootstrap,
  translate,
  translationInput,
  walkObjects,
  writeYaml,
} from '../deploy/manifests/egctl-translation';
import { startCustomStack, type CustomStack } from './support/custom-stack';

type Json = Record<string, unknown>;

const REQUESTS = 20_000;
const CONCURRENCY = 64;
const PUBLIC_GATEWAY = 'inference-gateway';
const CLUSTER = 'epd_coordinator';

const haveEgctl = fs.existsSync(EGCTL);
const title = haveEgctl
  ? 'a stock Envoy with the ext_proc filter and cluster egctl translates from config/k8s (no stream cap)'
  : 'a stock Envoy with the egctl translation of config/k8s (skipped: .tools/bin/egctl is absent; run config/k8s/verify-egctl.sh)';

/** The translated ext_proc filter and coordinator cluster of the public Gateway, the cluster's stream cap removed. */
function translatedParts(): { filter: Json; cluster: Json; cap: unknown } {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-egctl-stock-'));
  try {
    const input = translationInput();
    const gw = input.find((o) => o.kind === 'Gateway' && o.metadata.name === PUBLIC_GATEWAY)!;
    const proxyName = (gw['spec'] as { infrastructure?: { parametersRef?: { name: string } } }).infrastructure?.parametersRef?.name;
    const file = path.join(tmp, 'gw.yaml');
    writeYaml(
      file,
      input.filter((o) => o.kind !== 'EnvoyProxy' || o.metadata.name === proxyName),
    );
    const dump = translate(file).xds[`${TRANSLATE_NAMESPACE}/${PUBLIC_GATEWAY}`]!;
    const boot = staticBootstrap(dump) as { staticResources: { clusters: Json[]; listeners: Json[] } };
    const cluster = structuredClone(boot.staticResources.clusters.find((c) => String(c['name']).startsWith('envoyextensionpolicy/'))!);
    const listener = boot.staticResources.listeners.find((l) => String(l['name']).startsWith(`${TRANSLATE_NAMESPACE}/${PUBLIC_GATEWAY}/`))!;
    const filter = structuredClone([...walkObjects(listener)].find((o) => String(o['name']).startsWith('envoy.filters.http.ext_proc/'))!);
    const opts = (cluster['typedExtensionProtocolOptions'] as Json)['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'] as Json;
    const common = (opts['commonHttpProtocolOptions'] ?? {}) as Json;
    const cap = common['maxRequestsPerConnection'];
    delete common['maxRequestsPerConnection'];
    return { filter, cluster, cap };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

/** The shipped bootstrap with the translated filter and cluster in place of its own. */
function graft(text: string, parts: { filter: Json; cluster: Json }): string {
  const doc = yaml.load(text) as { static_resources: { clusters: Json[]; listeners: Json[] } };
  const ours = doc.static_resources.clusters.find((c) => c['name'] === CLUSTER)!;
  const cluster: Json = { ...parts.cluster, name: CLUSTER, loadAssignment: ours['load_assignment'] };
  delete cluster['healthChecks'];
  doc.static_resources.clusters = doc.static_resources.clusters.map((c) => (c['name'] === CLUSTER ? cluster : c));

  const filter = structuredClone(parts.filter);
  delete filter['disabled'];
  const grpc = (filter['typedConfig'] as Json)['grpcService'] as { envoyGrpc: Json };
  grpc.envoyGrpc['clusterName'] = CLUSTER;
  const publicListener = doc.static_resources.listeners.find((l) => l['name'] === 'public')!;
  let replaced = 0;
  for (const o of walkObjects(publicListener)) {
    const filters = o['http_filters'] as Json[] | undefined;
    if (!filters) continue;
    o['http_filters'] = filters.map((f) => (f['name'] === 'epd-coordinator' ? (replaced++, { ...filter, name: 'epd-coordinator' }) : f));
  }
  if (replaced !== 1) throw new Error(`expected one epd-coordinator filter on the public listener, found ${replaced}`);
  return JSON.stringify(doc, null, 1);
}

(haveEgctl ? describe : describe.skip)(title, () => {
  let stack: CustomStack;
  let client: TestClient;
  let cap: unknown;
  beforeAll(async () => {
    const parts = translatedParts();
    cap = parts.cap;
    stack = await startCustomStack({
      steps: () => [{ type: 'decode' }],
      logLevel: 1,
      // Stock: Envoy resets each ext_proc stream (the manifests turn graceful close on in the EnvoyProxy bootstrap).
      envoyPolicy: { extProcGracefulClose: false },
      editEnvoy: (text) => graft(text, parts),
    });
    client = new TestClient(stack.publicUrl);
  }, 120_000);
  afterAll(async () => {
    await client?.close();
    await stack?.close();
  });

  it(`carries ${REQUESTS} requests on one coordinator connection, every one a 200`, async () => {
    // The manifests' cap is the only one, and it is gone from what Envoy runs.
    expect(cap).toBe(500);
    const running = fs.readFileSync(path.join(stack.dir, 'envoy', 'envoy.yaml'), 'utf8');
    expect(running).not.toMatch(/max_?requests_?per_?connection/i);
    expect(running).toMatch(/FULL_DUPLEX_STREAMED/);
    expect(running).toContain(`"${GRACEFUL_CLOSE.runtimeKey}": false`);

    expect(await countStatuses(client, REQUESTS, CONCURRENCY)).toEqual({ 200: REQUESTS });
    const stats = await stack.envoy.stats(`cluster.${CLUSTER}.`);
    const failed = await stack.envoy.stats('streams_failed');
    const streamsFailed = Object.entries(failed)
      .filter(([k]) => k.startsWith('http.public.'))
      .reduce((n, [, v]) => n + v, 0);
    expect({
      upstream_cx_total: stats[`cluster.${CLUSTER}.upstream_cx_total`],
      upstream_cx_protocol_error: stats[`cluster.${CLUSTER}.upstream_cx_protocol_error`],
      upstream_cx_destroy_remote: stats[`cluster.${CLUSTER}.upstream_cx_destroy_remote`],
      streams_failed: streamsFailed,
    }).toEqual({ upstream_cx_total: 1, upstream_cx_protocol_error: 0, upstream_cx_destroy_remote: 0, streams_failed: 0 });
    expect(Object.keys(failed).some((k) => k.startsWith('http.public.'))).toBe(true);
    expect(stats[`cluster.${CLUSTER}.http2.tx_reset`]).toBeGreaterThanOrEqual(REQUESTS);
  }, 240_000);
});
