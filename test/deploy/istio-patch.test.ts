/**
 * config/istio's EnvoyFilter applied by Istio's own patch code, then run in Envoy with traffic.
 *
 * test/deploy/istio/ is a small Go program of ours that calls istio.io/istio's
 * pilot/pkg/networking/core/envoyfilter (ApplyListenerPatches, ApplyClusterMerge) on a gateway
 * listener built from Istio's own filters (the InferencePool EPP ext_proc filter and the router,
 * pilot/pkg/xds/filters). What it prints is grafted onto the shipped bootstrap's public listener
 * (filters, HCM settings, access log) and the coordinator's cluster, and the requests go through it.
 * The EPP filter stays as Istio leaves it at listener level (skipping; istiod turns it on per route).
 *
 * Needs .tools/bin/epd-istio-patch (config/istio/install-tools.sh builds it where Go is present).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import yaml from 'js-yaml';
import { request } from 'undici';
import { at, sseData, TestClient } from '../../launch/client';
import { REFUSED_PATH_BODY } from '../../src/pipeline/path-policy';
import { AccessLog } from '../support/access-log';
import { countStatuses } from '../faults/support/load';
import { startCustomStack, type CustomStack } from '../faults/support/custom-stack';
import { walkObjects } from './manifests/egctl-translation';
import { METADATA_KEYS, REPO_ROOT } from './manifests/manifest-files';

type Json = Record<string, any>;

const PATCHER = path.join(REPO_ROOT, '.tools/bin/epd-istio-patch');
const ISTIO_CLUSTER = 'outbound|50051||epd-coordinator.llm.svc.cluster.local';
const CLUSTER = 'epd_coordinator';
const havePatcher = fs.existsSync(PATCHER);
const title = `config/istio's EnvoyFilter applied by Istio's envoyfilter code, in Envoy with traffic${
  havePatcher ? '' : ' (skipped: .tools/bin/epd-istio-patch is absent; config/istio/install-tools.sh builds it where Go is present)'
}`;

function istioPatched(): { listener: Json; cluster: Json } {
  const r = spawnSync(PATCHER, [path.join(REPO_ROOT, 'config/istio/extension-filter.yaml')], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`epd-istio-patch failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout) as { listener: Json; cluster: Json };
}

const hcmOf = (listener: Json): Json => [...walkObjects(listener)].find((o) => Array.isArray(o['http_filters']))!;

/** The shipped bootstrap with Istio's patched filter chain, HCM settings and access log on the public listener. */
function graft(text: string, patched: { listener: Json; cluster: Json }, accessLogPath: string): string {
  const doc = yaml.load(text) as { static_resources: { clusters: Json[]; listeners: Json[] } };
  const src = structuredClone(hcmOf(patched.listener));
  const filters = JSON.parse(JSON.stringify(src['http_filters']).split(ISTIO_CLUSTER).join(CLUSTER)) as Json[];
  const pub = doc.static_resources.listeners.find((l) => l['name'] === 'public')!;
  const hcm = hcmOf(pub);
  hcm['http_filters'] = filters;
  // Istio's gateway has no catch-all route (Envoy Gateway's HTTPRouteFilter has no Istio form):
  // drop the bootstrap's, so that an unrouted path meets the EnvoyFilter's local-reply mapper.
  for (const vh of [...walkObjects(hcm)].filter((o) => Array.isArray(o['routes']))) {
    vh['routes'] = (vh['routes'] as Json[]).filter((r) => r['direct_response'] === undefined);
  }
  for (const k of [
    'preserve_external_request_id',
    'merge_slashes',
    'path_with_escaped_slashes_action',
    'stream_idle_timeout',
    'local_reply_config',
  ])
    hcm[k] = src[k];
  hcm['common_http_protocol_options'] = { ...hcm['common_http_protocol_options'], ...src['common_http_protocol_options'] };
  const logs = structuredClone(src['access_log']) as Json[];
  for (const l of logs) l['typed_config'].path = accessLogPath;
  hcm['access_log'] = logs;
  // The EPP filter's cluster as Istio names it at listener level (never called: the filter skips).
  doc.static_resources.clusters.push({
    name: 'dummy',
    type: 'STATIC',
    connect_timeout: '1s',
    load_assignment: { cluster_name: 'dummy', endpoints: [] },
  });
  const ours = doc.static_resources.clusters.find((c) => c['name'] === CLUSTER)!;
  ours['health_checks'] = patched.cluster['health_checks'];
  return JSON.stringify(doc, null, 1);
}

(havePatcher ? describe : describe.skip)(title, () => {
  jest.setTimeout(120_000);
  let patched: { listener: Json; cluster: Json };
  let stack: CustomStack;
  let client: TestClient;
  let accessLog: AccessLog;

  let logDir: string;

  beforeAll(async () => {
    patched = istioPatched();
    logDir = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-istio-patch-'));
    const logPath = path.join(logDir, 'access.log');
    stack = await startCustomStack({ logLevel: 1, editEnvoy: (text) => graft(text, patched, logPath) });
    accessLog = new AccessLog(logPath);
    client = new TestClient(stack.publicUrl);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
    if (logDir) fs.rmSync(logDir, { recursive: true, force: true });
  });

  it("Istio's patch code puts the strip and the coordinator before the EPP filter, and merges the HCM and cluster settings", () => {
    const hcm = hcmOf(patched.listener);
    expect((hcm['http_filters'] as Json[]).map((f) => f['name'])).toEqual([
      'epd-strip-routing-headers',
      'epd-coordinator',
      'envoy.filters.http.ext_proc',
      'envoy.filters.http.router',
    ]);
    expect(hcm['preserve_external_request_id']).toBe(true);
    expect(hcm['stream_idle_timeout']).toBe('600s');
    expect(patched.cluster['health_checks']).toHaveLength(1);
  });

  it('text chat runs the cascade; streaming arrives in pieces', async () => {
    const res = await client.post('/v1/chat/completions', {
      model: 'sim-model',
      messages: [{ role: 'user', content: 'hello istio' }],
      max_tokens: 20,
    });
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'message', 'content')).toBe('hello istio');
    expect(stack.prefill[0]!.requests.length).toBeGreaterThan(0);
    const s = await client.post('/v1/chat/completions', {
      model: 'sim-model',
      stream: true,
      messages: [{ role: 'user', content: 'one two three four five' }],
    });
    expect(s.status).toBe(200);
    expect(sseData(s.text).at(-1)).toBe('[DONE]');
  });

  it("a client's routing header never reaches the coordinator's decision: epp-profile encode is stripped", async () => {
    stack.reset();
    const res = await client.post(
      '/v1/completions',
      { model: 'sim-model', prompt: 'x', max_tokens: 2 },
      { headers: { 'epp-profile': 'encode' } },
    );
    expect(res.status).toBe(200);
    expect(stack.encode.requests).toEqual([]);
  });

  // Our filter runs before the router looks the route up, so the service's own allow-list answers
  // first; without it, the local-reply mapper gives the same body for the route miss (NR).
  it('an unrouted path is the OpenAI-shaped 404 of the service allow-list, before the route miss', async () => {
    stack.reset();
    const res = await request(`${stack.publicUrl}/metrics`);
    expect(res.statusCode).toBe(404);
    expect(JSON.parse(await res.body.text())).toEqual(JSON.parse(REFUSED_PATH_BODY));
    const line = await accessLog.waitFor((e) => e.path === '/metrics', 10_000);
    expect(line).toMatchObject({ response_code: 404, path_taken: 'error', error_step: 'path' });
    expect([stack.render, stack.encode, ...stack.prefill, stack.decode].flatMap((x) => x.requests)).toEqual([]);
  });

  it("the access log carries the coordinator's metadata; 2,000 requests, 0 errors", async () => {
    const id = `istio-${Date.now()}`;
    expect(
      (await client.post('/v1/completions', { model: 'sim-model', prompt: 'log', max_tokens: 2 }, { headers: { 'x-request-id': id } }))
        .status,
    ).toBe(200);
    const line = await accessLog.waitFor((e) => e.x_request_id === id, 10_000);
    expect(line['request_id']).toBe(id);
    for (const k of METADATA_KEYS) expect(Object.keys(line)).toContain(k);
    expect(await countStatuses(client, 2000, 32)).toEqual({ 200: 2000 });
  });
});
