/**
 * CRD schemas by apiVersion and kind, read from folders of published CRD files, and ajv validators
 * that judge a manifest the way the API server's structural schema does.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import yaml from 'js-yaml';
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';
import { REPO_ROOT, groupOf, versionOf } from './manifest-files';

/**
 * The project's CRDs (the Gateway API's as bundled by Envoy Gateway v1.9.0, EnvoyExtensionPolicy,
 * InferencePool v1.6.0): config/k8s/install-crds.sh puts them here from the Go module proxy, checked
 * against pinned sha256s.
 */
export const INSTALLED_CRDS_DIR = path.join(REPO_ROOT, '.tools/crds/project');
/** The same files in the workplace layout, beside the repository. */
export const SHARED_CRDS_DIR = path.resolve(REPO_ROOT, '../shared/crds');
const PROJECT_CRD_FILES = [
  'gatewayapi-crds.yaml',
  'gateway.envoyproxy.io_envoyextensionpolicies.yaml',
  'inference.networking.k8s.io_inferencepools.yaml',
];

/** The first of INSTALLED_CRDS_DIR and SHARED_CRDS_DIR that holds every project CRD file, if either does. */
export function projectCrdsDir(): string | undefined {
  return [INSTALLED_CRDS_DIR, SHARED_CRDS_DIR].find((dir) => PROJECT_CRD_FILES.every((f) => fs.existsSync(path.join(dir, f))));
}

/** Why the tests that need the project's CRDs skip (for their titles), and how to fix it. */
export const PROJECT_CRDS_ABSENT = `neither ${INSTALLED_CRDS_DIR} nor ${SHARED_CRDS_DIR} holds the Gateway API, EnvoyExtensionPolicy and InferencePool CRDs; run config/k8s/install-crds.sh (needs Go)`;

/** Envoy Gateway's own CRDs (EnvoyProxy, ClientTrafficPolicy, ...) as shipped in its v1.9.0 chart. */
export const EG_VERSION = 'v1.9.0';
const EG_CHART_CRDS = `charts/gateway-helm/charts/crds/crds/generated`;

/**
 * Where Envoy Gateway's CRDs may be found: `.tools/crds/` (filled by config/k8s/verify-egctl.sh and
 * cached in CI), else the Go module cache that `go install .../egctl@v1.9.0` fills.
 */
export function envoyGatewayCrdDirs(): string[] {
  const modCache = process.env['GOMODCACHE'] || path.join(process.env['GOPATH'] || path.join(os.homedir(), 'go'), 'pkg/mod');
  return [
    path.join(REPO_ROOT, '.tools/crds', `envoy-gateway-${EG_VERSION}`),
    path.join(modCache, `github.com/envoyproxy/gateway@${EG_VERSION}`, EG_CHART_CRDS),
  ];
}

type Schema = Record<string, unknown>;

export interface CrdVersion {
  readonly group: string;
  readonly kind: string;
  readonly version: string;
  readonly served: boolean;
  readonly schema: Schema;
  readonly file: string;
}

interface CrdDoc {
  kind?: string;
  spec?: {
    group: string;
    names: { kind: string };
    versions: { name: string; served: boolean; schema?: { openAPIV3Schema?: Schema } }[];
  };
}

function isSchemaObject(v: unknown): v is Schema {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * The API server prunes (or, with strict field validation, rejects) fields a structural schema
 * does not declare, but the OpenAPI schema itself never says so: ajv would accept any misspelt
 * field. Closing every object that declares properties makes a typo an error here too, as
 * `kubectl apply --validate=strict` does. `x-kubernetes-preserve-unknown-fields` keeps an object open.
 */
export function closeStructuralObjects(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closeStructuralObjects);
  if (!isSchemaObject(schema)) return schema;
  const out: Schema = {};
  for (const [k, v] of Object.entries(schema)) {
    if (k === 'properties' && isSchemaObject(v)) {
      out[k] = Object.fromEntries(Object.entries(v).map(([p, s]) => [p, closeStructuralObjects(s)]));
    } else if (k === 'enum' || k === 'default' || k === 'example' || k === 'x-kubernetes-validations') {
      out[k] = v;
    } else {
      out[k] = closeStructuralObjects(v);
    }
  }
  if (
    isSchemaObject(out['properties']) &&
    out['additionalProperties'] === undefined &&
    out['x-kubernetes-preserve-unknown-fields'] !== true
  ) {
    out['additionalProperties'] = false;
  }
  return out;
}

export class CrdCatalog {
  private readonly versions = new Map<string, CrdVersion>();
  private readonly validators = new Map<string, ValidateFunction>();
  // Formats (int32, date-time, ...) are the API server's business; CEL rules (x-kubernetes-validations)
  // cannot be evaluated here. Everything else in the schema is enforced.
  // CRD patterns are Go RE2, which allows identity escapes (`\-`, `\"`) that JavaScript's unicode mode refuses.
  private readonly ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false, logger: false, unicodeRegExp: false });

  /** Reads every CRD in the folders that exist; the first folder holding a kind wins. */
  static load(dirs: readonly string[]): CrdCatalog {
    const catalog = new CrdCatalog();
    for (const dir of dirs) {
      if (!fs.existsSync(dir)) continue;
      for (const file of fs
        .readdirSync(dir)
        .filter((f) => /\.ya?ml$/.test(f))
        .sort()) {
        catalog.addFile(path.join(dir, file));
      }
    }
    return catalog;
  }

  private addFile(file: string): void {
    for (const raw of yaml.loadAll(fs.readFileSync(file, 'utf8'))) {
      const doc = raw as CrdDoc | null;
      if (!doc || doc.kind !== 'CustomResourceDefinition' || !doc.spec) continue;
      for (const v of doc.spec.versions) {
        const schema = v.schema?.openAPIV3Schema;
        if (!schema) continue;
        const key = `${doc.spec.group}/${v.name}:${doc.spec.names.kind}`;
        if (this.versions.has(key)) continue;
        this.versions.set(key, { group: doc.spec.group, kind: doc.spec.names.kind, version: v.name, served: v.served, schema, file });
      }
    }
  }

  find(apiVersion: string, kind: string): CrdVersion | undefined {
    return this.versions.get(`${groupOf(apiVersion)}/${versionOf(apiVersion)}:${kind}`);
  }

  /** Kinds of a group that the catalog knows, in any version (to tell "wrong version" from "no CRD"). */
  knowsGroupKind(group: string, kind: string): boolean {
    for (const v of this.versions.values()) if (v.group === group && v.kind === kind) return true;
    return false;
  }

  /** Schema errors of one object, as `path: message` lines; empty when it is valid. */
  validate(obj: { apiVersion: string; kind: string }): string[] {
    const crd = this.find(obj.apiVersion, obj.kind);
    if (!crd) throw new Error(`no CRD schema for ${obj.apiVersion} ${obj.kind}`);
    const key = `${crd.group}/${crd.version}:${crd.kind}`;
    let validate = this.validators.get(key);
    if (!validate) {
      validate = this.ajv.compile(closeStructuralObjects(withObjectMeta(crd.schema)) as Schema);
      this.validators.set(key, validate);
    }
    if (validate(obj)) return [];
    return (validate.errors ?? []).map(describeError);
  }
}

/**
 * Every object has apiVersion, kind and metadata, whether or not its CRD declares them (Istio's
 * declare only spec and status); the API server checks metadata itself.
 */
function withObjectMeta(schema: Schema): Schema {
  const props = isSchemaObject(schema['properties']) ? schema['properties'] : {};
  return {
    ...schema,
    properties: {
      apiVersion: { type: 'string' },
      kind: { type: 'string' },
      metadata: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
      ...props,
    },
  };
}

function describeError(e: ErrorObject): string {
  const where = e.instancePath || '(root)';
  if (e.keyword === 'additionalProperties') {
    return `${where}: unknown field "${(e.params as { additionalProperty: string }).additionalProperty}"`;
  }
  if (e.keyword === 'enum') return `${where}: ${e.message} ${JSON.stringify((e.params as { allowedValues: unknown }).allowedValues)}`;
  return `${where}: ${e.message}`;
}
