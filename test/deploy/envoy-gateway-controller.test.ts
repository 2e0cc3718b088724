/**
 * Envoy Gateway's own controller, standalone (no Kubernetes): `envoy-gateway server` with the File
 * resource provider and the Host infrastructure provider, fed config/k8s as
 * test/deploy/envoy-gateway/standalone-resources.ts derives it. The controller reconciles the
 * manifests, reports status, and starts Envoy 1.40.0 itself (func-e, seeded: nothing is fetched);
 * the requests here go through that Envoy to our service and the simulators.
 *
 * Status: the File provider writes no status back to the files; it logs every update as YAML
 * ("Got new status for <Kind>" ... "key": "<ns>/<name>"). The test reads it from the controller's log.
 * Envoy's own view (the ext_proc filter it runs, its runtime) is read from the admin address func-e
 * writes for each run (<runtimeDir>/<run>/admin-address.txt).
 *
 * Needs .tools/bin/envoy-gateway (config/k8s/verify-egctl.sh builds it where Go is present) and the
 * Envoy of scripts/ensure-deps.sh. The controller binds fixed ports (FIXED_PORTS), so only one such
 * test runs on a machine at a time.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { request } from 'undici';
import { at, sseData, TestClient } from '../../launch/client';
import { canBind, freePort, sleep, waitUntil } from '../../launch/ports';
import { startSimulator, type Simulator } from '../../sim/simulator';
import { parseConfig } from '../../src/config/config';
import { createLogger } from '../../src/observability/logger';
import { startService, type RunningService } from '../../src/service';
import { stackConfigDoc } from '../support/stack';
import { AccessLog } from '../support/access-log';
import { countStatuses, startLoad } from '../faults/support/load';
import { PNG_BYTES } from '../unit/steps/media/image-server';
import { envoyBinary } from './manifests/egctl-translation';
import { GRACEFUL_CLOSE } from '../../launch/envoy-policy';
import { loadManifests, type K8sObject } from './manifests/manifest-files';
import { ENVOY_GATEWAY, FIXED_PORTS, conditionsOf, startEnvoyGateway, type EnvoyGateway } from './envoy-gateway/controller';
import { STANDALONE_NAMESPACE, standaloneResources, type StandaloneTargets } from './envoy-gateway/standalone-resources';

const MODEL = 'sim-model';
const POLICY = 'epd-coordinator';
const PUBLIC_PROXY = 'inference-gateway-proxy';
const LOAD_REQUESTS = 5_000;

const haveController = fs.existsSync(ENVOY_GATEWAY);
const envoy = haveController ? envoyBinary() : undefined;
const skipReason = !haveController
  ? '.tools/bin/envoy-gateway is absent; config/k8s/verify-egctl.sh builds it where Go is present'
  : !envoy
    ? 'no Envoy; scripts/ensure-deps.sh installs it'
    : undefined;
const title = `Envoy Gateway's controller (standalone, File + Host providers) running config/k8s${skipReason ? ` (skipped: ${skipReason})` : ''}`;

let seq = 0;
const nextId = (): string => `egc-${process.pid}-${Date.now()}-${++seq}`;
const pngUri = `data:image/png;base64,${PNG_BYTES.toString('base64')}`;

async function adminGet(address: string, p: string): Promise<string> {
  const res = await request(`http://${address}${p}`, { signal: AbortSignal.timeout(5000) });
  return res.body.text();
}

(skipReason ? describe.skip : describe)(title, () => {
  jest.setTimeout(120_000);
  let dir: string;
  let eg: EnvoyGateway | undefined;
  let service: RunningService | undefined;
  const sims: Partial<Record<'render' | 'encode' | 'prefill' | 'decode', Simulator>> = {};
  let client: TestClient;
  let publicUrl: string;
  let accessLog: AccessLog;
  let targets: StandaloneTargets;
  let manifests: K8sObject[];
  let logDest: ReturnType<typeof pino.destination> | undefined;

  /** The admin address of the Envoy serving the public Gateway (the one with the ext_proc filter). */
  async function publicAdmin(): Promise<string> {
    for (const a of eg!.envoyAdmins()) {
      const listeners = await adminGet(a, '/listeners?format=json').catch(() => '');
      if (new RegExp(`"port_value":\\s*${targets.gatewayPorts['inference-gateway']}\\b`).test(listeners)) return a;
    }
    throw new Error(`no Envoy listens on the public Gateway's port (admins: ${eg!.envoyAdmins().join(', ')})`);
  }

  const policyStatus = (name: string) => {
    const hits = eg!.statuses().filter((s) => s.key === `${STANDALONE_NAMESPACE}/${name}` && 'ancestors' in s.status);
    return hits[hits.length - 1];
  };

  beforeAll(async () => {
    const busy: number[] = [];
    for (const p of FIXED_PORTS) if (!(await canBind(p))) busy.push(p);
    if (busy.length > 0) throw new Error(`ports the controller needs are taken (${busy.join(', ')}): is another envoy-gateway running?`);

    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-eg-controller-'));
    for (const role of ['render', 'encode', 'prefill', 'decode'] as const) {
      sims[role] = await startSimulator({ name: `sim-${role}-0`, role, port: 0, interTokenLatencyMs: 5 });
    }
    const gatewayPort = await freePort();
    const publicPort = await freePort();
    const config = parseConfig(
      stackConfigDoc(
        {
          kvConnector: 'kv-nixl',
          logLevel: 1,
          steps: ({ render }) => [
            { type: 'replace-media-urls', params: { allowed_ip_ranges: ['127.0.0.1/32'] } },
            { type: 'render', params: { address: render } },
            { type: 'encode', params: { ec_connector: 'ec-nixl' } },
            { type: 'prefill', params: { ec_connector: 'ec-nixl' } },
            { type: 'decode' },
          ],
        },
        { gateway: `http://127.0.0.1:${gatewayPort}`, render: sims.render!.url },
      ),
      {},
    );
    logDest = pino.destination({ dest: path.join(dir, 'service.log'), sync: true });
    service = await startService(config, { log: createLogger(1, logDest) });
    targets = {
      gatewayPorts: { 'inference-gateway': publicPort, 'epd-internal': gatewayPort },
      coordinatorPort: service.grpcPort,
      workers: { encode: sims.encode!.port, prefill: sims.prefill!.port, decode: sims.decode!.port },
      accessLogs: { [PUBLIC_PROXY]: path.join(dir, 'public-access.log'), 'epd-internal-proxy': path.join(dir, 'internal-access.log') },
    };
    manifests = standaloneResources(
      loadManifests().map((m) => m.obj),
      targets,
    );
    eg = await startEnvoyGateway({ dir: path.join(dir, 'eg'), envoy: envoy!, resources: manifests });
    publicUrl = `http://127.0.0.1:${publicPort}`;
    accessLog = new AccessLog(targets.accessLogs[PUBLIC_PROXY]!);
    client = new TestClient(publicUrl);
  });

  afterAll(async () => {
    await client?.close();
    await eg?.stop();
    await service?.close(500).catch(() => undefined);
    await Promise.all(Object.values(sims).map((s) => s.close().catch(() => undefined)));
    logDest?.end();
    if (dir && !process.env['KEEP_STACK_DIR']) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('reports the extension policy and the client traffic policy Accepted (from its log), and starts Envoy 1.40.0 without a download', async () => {
    await waitUntil(
      () => conditionsOf(policyStatus(POLICY)?.status ?? {}, 'Accepted').some((c) => c.status === 'True'),
      'policy Accepted',
      60_000,
      200,
    );
    await waitUntil(
      () => conditionsOf(policyStatus('inference-gateway-clients')?.status ?? {}, 'Accepted').some((c) => c.status === 'True'),
      'ClientTrafficPolicy Accepted',
      30_000,
      200,
    );
    // The newest status of every resource has no condition that is not True. A Gateway's
    // Programmed is False (AddressNotAssigned) on the Host provider: no Service gives it an address.
    const latest = new Map(eg!.statuses().map((s) => [`${s.kind} ${s.key}`, s]));
    const notTrue = [...latest.values()].flatMap((s) =>
      ['Accepted', 'ResolvedRefs'].flatMap((t) =>
        conditionsOf(s.status, t)
          .filter((c) => c.status !== 'True')
          .map((c) => `${s.kind} ${s.key}: ${t}=${c.status} ${c.reason} ${c.message ?? ''}`),
      ),
    );
    expect(notTrue).toEqual([]);
    const log = fs.readFileSync(eg!.logPath, 'utf8');
    expect(log).not.toMatch(/downloading|Downloading/);
    await waitUntil(async () => (await publicAdmin().catch(() => undefined)) !== undefined, 'public Envoy', 30_000, 200);
    expect(await adminGet(await publicAdmin(), '/server_info')).toContain('1.40.0');
    // The EnvoyProxy's bootstrap Merge (graceful ext_proc close) reached the Envoy the Host provider runs.
    for (const admin of eg!.envoyAdmins()) {
      const runtime = JSON.parse(await adminGet(admin, '/runtime')) as { entries: Record<string, { final_value: string }> };
      expect({ admin, value: runtime.entries[GRACEFUL_CLOSE.runtimeKey]?.final_value }).toEqual({ admin, value: 'true' });
    }
  });

  it('text chat: render -> prefill -> decode through the controller-made Envoy, the client x-request-id kept', async () => {
    const id = nextId();
    const body = { model: MODEL, messages: [{ role: 'user', content: 'hello via envoy gateway' }], max_tokens: 20 };
    // The coordinator cluster's first gRPC health check may still be pending right after start.
    await waitUntil(async () => (await client.post('/v1/chat/completions', body)).status === 200, 'first 200', 30_000, 250);
    for (const s of Object.values(sims)) s.clear();
    const res = await client.post('/v1/chat/completions', body, { headers: { 'x-request-id': id } });
    expect(res.status).toBe(200);
    expect(at(res.json, 'choices', 0, 'message', 'content')).toBe('hello via envoy gateway');
    expect(sims.render!.requests.map((r) => r.path)).toEqual(['/v1/chat/completions/render']);
    expect(sims.prefill!.requests).toHaveLength(1);
    expect(sims.prefill!.requests[0]!.headers['epp-profile']).toBe('prefill');
    const decode = sims.decode!.requests;
    expect(decode).toHaveLength(1);
    expect(decode[0]!.headers['x-request-id']).toBe(id);
    expect(at(decode[0]!.json, 'tokens', 'token_ids')).toEqual(at(sims.prefill!.requests[0]!.json, 'tokens', 'token_ids'));
  });

  it('the access log line carries the coordinator dynamic metadata (namespace epd.coordinator)', async () => {
    const id = nextId();
    const res = await client.post(
      '/v1/completions',
      { model: MODEL, prompt: 'log me', max_tokens: 2 },
      { headers: { 'x-request-id': id } },
    );
    expect(res.status).toBe(200);
    const line = await accessLog.waitFor((e) => e.x_request_id === id, 10_000);
    expect(line).toMatchObject({ request_id: id, response_code: 200 });
    expect(line.path_taken).toEqual(expect.any(String));
    expect(line.steps).toEqual(expect.stringContaining('prefill'));
  });

  it('an image: encode runs on the internal gateway, its EC params reach prefill', async () => {
    for (const s of Object.values(sims)) s.clear();
    const res = await client.post('/v1/chat/completions', {
      model: MODEL,
      max_tokens: 5,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this' },
            { type: 'image_url', image_url: { url: pngUri } },
          ],
        },
      ],
    });
    expect(res.status).toBe(200);
    expect(sims.encode!.requests).toHaveLength(1);
    expect(sims.encode!.requests[0]!.headers['epp-profile']).toBe('encode');
    expect(at(sims.prefill!.requests[0]!.json, 'ec_transfer_params')).toBeDefined();
    expect(sims.decode!.requests).toHaveLength(1);
  });

  it('streaming: SSE arrives in pieces and ends with [DONE]', async () => {
    const res = await client.post('/v1/chat/completions', {
      model: MODEL,
      stream: true,
      messages: [{ role: 'user', content: 'one two three four five six seven eight' }],
    });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/event-stream/);
    const data = sseData(res.text);
    expect(data[data.length - 1]).toBe('[DONE]');
    const text = data
      .slice(0, -1)
      .map((d) => (at(JSON.parse(d), 'choices', 0, 'delta', 'content') as string | undefined) ?? '')
      .join('');
    expect(text).toBe('one two three four five six seven eight');
    expect(res.reads.filter((r) => r.includes('data:') && !r.includes('[DONE]')).length).toBeGreaterThan(1);
  });

  it('a control path is the HTTPRouteFilter 404 in the OpenAI shape; no worker sees it', async () => {
    for (const s of Object.values(sims)) s.clear();
    const res = await client.post('/v1/load_lora_adapter', { lora_name: 'x', lora_path: '/tmp' });
    expect(res.status).toBe(404);
    expect(res.json).toMatchObject({ error: { code: 404, type: 'invalid_request_error' } });
    const get = await request(`${publicUrl}/metrics`);
    expect(get.statusCode).toBe(404);
    await get.body.text();
    expect(Object.values(sims).flatMap((s) => s.requests)).toEqual([]);
  });

  it(`${LOAD_REQUESTS} requests, 0 errors`, async () => {
    expect(await countStatuses(client, LOAD_REQUESTS, 32)).toEqual({ 200: LOAD_REQUESTS });
  });

  it('a change to the extension policy, applied while traffic runs, reaches Envoy with nothing dropped', async () => {
    const admin = await publicAdmin();
    const before = await adminGet(admin, '/config_dump?resource=dynamic_listeners');
    expect(before).toMatch(/"message_timeout":\s*"600s"/);
    const load = startLoad(publicUrl, {
      concurrency: 16,
      body: () => ({ path: '/v1/completions', body: { model: MODEL, prompt: 'during the change', max_tokens: 2 } }),
    });
    await sleep(1000);
    const changed = structuredClone(manifests);
    const policy = changed.find((o) => o.kind === 'EnvoyExtensionPolicy' && o.metadata.name === POLICY)!;
    (policy['spec'] as { extProc: { messageTimeout: string }[] }).extProc[0]!.messageTimeout = '601s';
    eg!.apply(changed);
    await waitUntil(
      async () => /"message_timeout":\s*"601s"/.test(await adminGet(admin, '/config_dump?resource=dynamic_listeners')),
      'Envoy running the changed policy',
      60_000,
      250,
    );
    const appliedAt = performance.now();
    await sleep(1500);
    const outcomes = await load.stop();
    const counts: Record<string, number> = {};
    for (const o of outcomes) counts[String(o.status)] = (counts[String(o.status)] ?? 0) + 1;
    expect(counts).toEqual({ 200: outcomes.length });
    // Traffic ran on both sides of the change.
    expect(outcomes.filter((o) => o.end < appliedAt).length).toBeGreaterThan(0);
    expect(outcomes.filter((o) => o.start > appliedAt).length).toBeGreaterThan(0);
  });
});
