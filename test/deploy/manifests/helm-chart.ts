/**
 * Rendering charts/epd-coordinator with Helm, Kubernetes' own JSON schemas for the built-in kinds,
 * and the comparison of the chart's default render with what `kubectl apply -k config/k8s` applies.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import yaml from 'js-yaml';
import Ajv2020, { type ErrorObject, type ValidateFunction } from 'ajv/dist/2020';
import { REPO_ROOT, type K8sObject, groupOf, loadManifests, readKustomization, versionOf } from './manifest-files';

export const CHART_DIR = path.join(REPO_ROOT, 'charts/epd-coordinator');
export const HELM = path.join(REPO_ROOT, '.tools/bin/helm');
/** The oldest Kubernetes the chart supports (Chart.yaml kubeVersion); charts/install-tools.sh unpacks its schemas. */
export const K8S_SCHEMA_VERSION = 'v1.30.0';
export const K8S_SCHEMA_DIR = path.join(REPO_ROOT, '.tools/kubernetes-json-schema', `${K8S_SCHEMA_VERSION}-local-strict`);
/** The release name that gives the chart's objects config/k8s's names. */
export const RELEASE = 'epd-coordinator';
export const NAMESPACE = 'llm';

export interface RenderResult {
  readonly status: number | null;
  readonly stderr: string;
  readonly objects: K8sObject[];
}

/**
 * `helm template` with values given as a YAML file (so nested lists and maps need no --set quoting).
 * Helm checks values.schema.json before rendering, as `helm install` does.
 */
export function helmTemplate(values: Record<string, unknown> = {}, opts: { release?: string; namespace?: string } = {}): RenderResult {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-helm-'));
  try {
    const valuesFile = path.join(tmp, 'values.yaml');
    fs.writeFileSync(valuesFile, yaml.dump(values));
    const r = spawnSync(
      HELM,
      [
        'template',
        opts.release ?? RELEASE,
        CHART_DIR,
        '--namespace',
        opts.namespace ?? NAMESPACE,
        '-f',
        valuesFile,
        '--kube-version',
        '1.30.0',
      ],
      {
        encoding: 'utf8',
        timeout: 60_000,
        env: {
          ...process.env,
          HELM_CACHE_HOME: path.join(tmp, 'cache'),
          HELM_CONFIG_HOME: path.join(tmp, 'config'),
          HELM_DATA_HOME: path.join(tmp, 'data'),
        },
      },
    );
    const objects =
      r.status === 0 ? (yaml.loadAll(r.stdout) as (K8sObject | null)[]).filter((o): o is K8sObject => o !== null && o !== undefined) : [];
    return { status: r.status, stderr: r.stderr || r.error?.message || '', objects };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

/** A successful render's objects; throws with Helm's message otherwise. */
export function render(values: Record<string, unknown> = {}, opts: { release?: string; namespace?: string } = {}): K8sObject[] {
  const r = helmTemplate(values, opts);
  if (r.status !== 0) throw new Error(`helm template failed (${r.status}): ${r.stderr}`);
  return r.objects;
}

export const keyOf = (o: { apiVersion: string; kind: string; metadata: { name: string } }): string =>
  `${o.kind}/${o.metadata.name} (${o.apiVersion})`;

// ---- Kubernetes' own schemas for the built-in kinds ---------------------------------------------------

/**
 * Strict JSON schemas of the built-in kinds, generated from Kubernetes' OpenAPI by the
 * kubernetes-validate project (PyPI): every object is closed, so an unknown field is an error, as
 * with `kubectl apply --validate=strict`. File names are `<kind>-<group>-<version>.json`.
 */
export class KubeSchemas {
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false, logger: false });
  private readonly validators = new Map<string, ValidateFunction>();

  constructor(private readonly dir: string = K8S_SCHEMA_DIR) {
    const defs = JSON.parse(fs.readFileSync(path.join(dir, '_definitions.json'), 'utf8')) as Record<string, unknown>;
    this.ajv.addSchema({ ...defs, $id: `${KubeSchemas.BASE}/_definitions.json` });
  }

  private static readonly BASE = 'https://kubernetes.local/api';

  static present(dir: string = K8S_SCHEMA_DIR): boolean {
    return fs.existsSync(path.join(dir, '_definitions.json'));
  }

  fileFor(apiVersion: string, kind: string): string {
    const group = groupOf(apiVersion).split('.')[0];
    const parts = [kind.toLowerCase(), ...(group ? [group] : []), versionOf(apiVersion)];
    return path.join(this.dir, `${parts.join('-')}.json`);
  }

  has(apiVersion: string, kind: string): boolean {
    return fs.existsSync(this.fileFor(apiVersion, kind));
  }

  validate(obj: { apiVersion: string; kind: string }): string[] {
    const file = this.fileFor(obj.apiVersion, obj.kind);
    let v = this.validators.get(file);
    if (!v) {
      const schema = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
      // The files name the definitions as "/api/_definitions.json#/$defs/..."; an $id on this base resolves them.
      v = this.ajv.compile({ ...schema, $id: `${KubeSchemas.BASE}/${path.basename(file)}` });
      this.validators.set(file, v);
    }
    return v(obj) ? [] : (v.errors ?? []).map(describe);
  }
}

function describe(e: ErrorObject): string {
  const where = e.instancePath || '(root)';
  if (e.keyword === 'additionalProperties')
    return `${where}: unknown field "${(e.params as { additionalProperty: string }).additionalProperty}"`;
  return `${where}: ${e.message}`;
}

// ---- the chart's default render against config/k8s -----------------------------------------------------

/**
 * What `kubectl apply -k config/k8s` applies, computed from the files and the two transformations
 * the kustomization declares: its `labels` (metadata.labels only, includeSelectors: false) and its
 * `images` (name -> newName:newTag). The test checks this against `kubectl kustomize` where kubectl exists.
 */
export function kustomizeBuild(): K8sObject[] {
  const k = readKustomization() as {
    labels?: { pairs: Record<string, string>; includeSelectors?: boolean; includeTemplates?: boolean }[];
    images?: { name: string; newName?: string; newTag?: string }[];
  };
  for (const l of k.labels ?? []) {
    if (l.includeSelectors || l.includeTemplates)
      throw new Error('kustomizeBuild models labels without includeSelectors/includeTemplates only; use kubectl kustomize');
  }
  return loadManifests().map(({ obj }) => {
    const o = structuredClone(obj);
    for (const l of k.labels ?? []) o.metadata.labels = { ...(o.metadata.labels ?? {}), ...l.pairs };
    for (const c of [
      ...((o['spec'] as { template?: { spec?: { containers?: { image: string }[] } } })?.template?.spec?.containers ?? []),
    ]) {
      const img = (k.images ?? []).find((i) => i.name === c.image.split(':')[0]);
      if (img) c.image = `${img.newName ?? img.name}:${img.newTag ?? c.image.split(':')[1] ?? 'latest'}`;
    }
    return o;
  });
}

/** Labels Helm's conventions add to every object and selector; config/k8s has no release to name. */
export const HELM_ONLY_LABELS = [
  'helm.sh/chart',
  'app.kubernetes.io/managed-by',
  'app.kubernetes.io/instance',
  'app.kubernetes.io/version',
];
/** The pod annotation that rolls the pods when the config changes (kustomize users restart by hand). */
export const HELM_ONLY_ANNOTATIONS = ['checksum/config'];

/**
 * One object as the comparison sees it: the Helm-only labels and annotations removed wherever a
 * label map sits (metadata, selectors, pod template, spread constraints), and the coordinator.yaml
 * of a ConfigMap parsed, so that its comments and key order do not count but every value does.
 */
export function normalise(obj: K8sObject): K8sObject {
  const o = structuredClone(obj) as K8sObject;
  const stripLabels = (m: Record<string, string> | undefined): Record<string, string> | undefined => {
    if (!m) return m;
    const out = Object.fromEntries(Object.entries(m).filter(([k]) => !HELM_ONLY_LABELS.includes(k)));
    return out;
  };
  const walk = (v: unknown, key: string): unknown => {
    if (Array.isArray(v)) return v.map((x) => walk(x, ''));
    if (!v || typeof v !== 'object') return v;
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      if (
        (k === 'labels' || k === 'matchLabels' || (k === 'selector' && key === 'spec' && o.kind === 'Service')) &&
        x &&
        typeof x === 'object' &&
        !Array.isArray(x)
      ) {
        out[k] = stripLabels(x as Record<string, string>);
      } else if (k === 'annotations' && x && typeof x === 'object') {
        const kept = Object.fromEntries(Object.entries(x as Record<string, string>).filter(([a]) => !HELM_ONLY_ANNOTATIONS.includes(a)));
        if (Object.keys(kept).length > 0) out[k] = kept;
      } else {
        out[k] = walk(x, k);
      }
    }
    return out;
  };
  const n = walk(o, '') as K8sObject;
  if (n.kind === 'ConfigMap') {
    const data = n['data'] as Record<string, string> | undefined;
    if (data?.['coordinator.yaml'] !== undefined) data['coordinator.yaml'] = yaml.load(data['coordinator.yaml']) as string;
  }
  return n;
}

/** Every leaf where two values differ, as `path: left -> right` lines. */
export function diffPaths(a: unknown, b: unknown, at = ''): string[] {
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  if (a && b && typeof a === 'object' && typeof b === 'object' && Array.isArray(a) === Array.isArray(b)) {
    if (Array.isArray(a) && Array.isArray(b) && a.length !== b.length)
      return [`${at}: ${a.length} items -> ${b.length} items: ${JSON.stringify(a)} -> ${JSON.stringify(b)}`];
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) =>
      diffPaths((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], Array.isArray(a) ? `${at}[${k}]` : `${at}.${k}`),
    );
  }
  return [`${at || '(root)'}: ${JSON.stringify(a)} -> ${JSON.stringify(b)}`];
}

/**
 * The differences between config/k8s (kustomize-built, less its example InferencePool) and a chart
 * render, one line each: objects only one side has, and every field that differs. Empty = identical.
 */
export function differencesFromK8s(chartObjects: readonly K8sObject[], k8sObjects: readonly K8sObject[] = kustomizeBuild()): string[] {
  const chart = new Map(chartObjects.map((o) => [keyOf(o), normalise(o)]));
  const k8s = new Map(k8sObjects.filter((o) => o.kind !== 'InferencePool').map((o) => [keyOf(o), normalise(o)]));
  const problems: string[] = [];
  for (const k of k8s.keys()) if (!chart.has(k)) problems.push(`${k}: in config/k8s, not rendered by the chart`);
  for (const k of chart.keys()) if (!k8s.has(k)) problems.push(`${k}: rendered by the chart, not in config/k8s`);
  for (const [k, obj] of k8s) {
    const c = chart.get(k);
    if (c) for (const d of diffPaths(obj, c)) problems.push(`${k} ${d}   (config/k8s -> chart)`);
  }
  return problems;
}
