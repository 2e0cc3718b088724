/**
 * config/gke: the GKE Gateway objects against the CRD schemas of GoogleCloudPlatform/gke-gateway-api
 * (copied into test/fixtures/gke-crds, SOURCE.md names the commit) and the Gateway API's, the routes
 * against config/k8s's, the extension's path match against launch/path-policy.ts, its processing
 * against Envoy's filter, and the health check against launch/envoy-policy.ts. Nothing here runs
 * a GKE load balancer (docs/deploy-gke.md says what is untested).
 */
import path from 'node:path';
import { allowedMatches } from '../../../launch/path-policy';
import { SERVICE_HEALTH_CHECK } from '../../../launch/envoy-policy';
import { CrdCatalog, PROJECT_CRDS_ABSENT, projectCrdsDir } from './crd-catalog';
import { REPO_ROOT, findObject, loadManifests, manifestFileNames, readKustomization } from './manifest-files';

const GKE_DIR = path.join(REPO_ROOT, 'config/gke');
const GKE_CRDS = path.join(REPO_ROOT, 'test/fixtures/gke-crds');
const gke = loadManifests(GKE_DIR);
const k8s = loadManifests();

interface Extension {
  name: string;
  failOpen: boolean;
  requestBodySendMode: string;
  supportedEvents: string[];
  backendRef: { kind: string; name: string; port: number };
}
const chain = () =>
  (
    findObject(gke, 'GCPRoutingExtension', 'epd-coordinator')['spec'] as {
      extensionChains: { matchCondition: { celExpressions: { celMatcher: string }[] }; extensions: Extension[] }[];
    }
  ).extensionChains[0]!;

describe('config/gke', () => {
  it('the kustomization lists every file', () => {
    expect([...readKustomization(GKE_DIR).resources].sort()).toEqual(manifestFileNames(GKE_DIR));
  });

  it("the routes are config/k8s's epd-inference and epd-side-calls, unchanged", () => {
    for (const name of ['epd-inference', 'epd-side-calls'])
      expect(findObject(gke, 'HTTPRoute', name)).toEqual(findObject(k8s, 'HTTPRoute', name));
  });

  it("the extension's CEL match is exactly the path allow-list", () => {
    const cel = chain()
      .matchCondition.celExpressions.map((c) => c.celMatcher)
      .join(' || ');
    const terms = cel.split('||').map((t) => t.trim());
    const parsed = terms.map((t) => {
      const exact = /^request\.path == "([^"]+)"$/.exec(t);
      if (exact) return { path: exact[1]! };
      const prefix = /^request\.path\.startsWith\("([^"]+)"\)$/.exec(t);
      if (prefix) return { prefix: prefix[1]! };
      throw new Error(`unexpected CEL term: ${t}`);
    });
    const key = (m: { path: string } | { prefix: string }) => ('path' in m ? `=${m.path}` : `^${m.prefix}`);
    expect(parsed.map(key).sort()).toEqual(allowedMatches().map(key).sort());
  });

  it("the coordinator runs full duplex on request headers, body and trailers, fail closed, on its Service's gRPC port", () => {
    const ext = chain().extensions;
    expect(ext).toHaveLength(1);
    expect(ext[0]).toMatchObject({
      failOpen: false,
      requestBodySendMode: 'FullDuplexStreamed',
      supportedEvents: ['RequestHeaders', 'RequestBody', 'RequestTrailers'],
      backendRef: { kind: 'Service', name: 'epd-coordinator', port: 50051 },
    });
  });

  it("the load balancer's health check is launch/envoy-policy.ts's grpc.health.v1 check", () => {
    const d = (findObject(gke, 'HealthCheckPolicy', 'epd-coordinator')['spec'] as { default: Record<string, unknown> }).default;
    expect(d).toEqual({
      checkIntervalSec: SERVICE_HEALTH_CHECK.intervalSeconds,
      timeoutSec: SERVICE_HEALTH_CHECK.timeoutSeconds,
      healthyThreshold: SERVICE_HEALTH_CHECK.healthyThreshold,
      unhealthyThreshold: SERVICE_HEALTH_CHECK.unhealthyThreshold,
      config: { type: 'GRPC', grpcHealthCheck: { grpcServiceName: SERVICE_HEALTH_CHECK.service, portSpecification: 'USE_SERVING_PORT' } },
    });
  });
});

const projectCrds = projectCrdsDir();
(projectCrds ? describe : describe.skip)(
  `config/gke against gke-gateway-api's CRD schemas and the Gateway API's${projectCrds ? '' : ` (skipped: ${PROJECT_CRDS_ABSENT})`}`,
  () => {
    const catalog = projectCrds ? CrdCatalog.load([projectCrds, GKE_CRDS]) : undefined;
    it.each(gke.map((m) => [`${m.where} ${m.obj.kind}/${m.obj.metadata.name}`, m.obj] as const))('%s validates', (_label, obj) => {
      expect(catalog!.find(obj.apiVersion, obj.kind)?.served).toBe(true);
      expect(catalog!.validate(obj)).toEqual([]);
    });
  },
);
