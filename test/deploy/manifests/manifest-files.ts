/**
 * Reads the Kubernetes manifests of config/k8s as the documents kubectl would apply: every file the
 * kustomization lists, split into its YAML documents.
 */
import fs from 'node:fs';
import path from 'node:path';
import yaml from 'js-yaml';

export const REPO_ROOT = path.resolve(__dirname, '../../..');
export const K8S_DIR = path.join(REPO_ROOT, 'config/k8s');

/** The keys the coordinator writes under its dynamic-metadata namespace (docs/operations.md), which every access log prints. */
export const METADATA_KEYS: readonly string[] = [
  'request_id',
  'path_taken',
  'step_ms',
  'steps',
  'token_count',
  'mm_entries',
  'parse_ms',
  'total_ms',
  'status',
  'error_step',
  'error_class',
  'upstream_status',
  'disaggregation',
];

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [key: string]: unknown;
}

export interface Manifest {
  /** File name relative to config/k8s, and the document's position in it, for messages. */
  readonly where: string;
  readonly obj: K8sObject;
}

export interface Kustomization {
  resources: string[];
  [key: string]: unknown;
}

export function readKustomization(dir: string = K8S_DIR): Kustomization {
  const doc = yaml.load(fs.readFileSync(path.join(dir, 'kustomization.yaml'), 'utf8')) as Kustomization;
  if (!doc || !Array.isArray(doc.resources)) throw new Error('kustomization.yaml has no resources list');
  return doc;
}

/** Every YAML file in the folder except the kustomization itself. */
export function manifestFileNames(dir: string = K8S_DIR): string[] {
  return fs
    .readdirSync(dir)
    .filter((f) => /\.ya?ml$/.test(f) && f !== 'kustomization.yaml')
    .sort();
}

export function loadManifests(dir: string = K8S_DIR): Manifest[] {
  const out: Manifest[] = [];
  for (const file of manifestFileNames(dir)) {
    const docs = yaml.loadAll(fs.readFileSync(path.join(dir, file), 'utf8'));
    docs.forEach((doc, i) => {
      if (doc === null || doc === undefined) return;
      out.push({ where: `${file}#${i}`, obj: doc as K8sObject });
    });
  }
  return out;
}

/** `group/version` -> group ("" for the core group). */
export function groupOf(apiVersion: string): string {
  const slash = apiVersion.indexOf('/');
  return slash < 0 ? '' : apiVersion.slice(0, slash);
}

export function versionOf(apiVersion: string): string {
  return apiVersion.slice(apiVersion.indexOf('/') + 1);
}

/** The one object of a kind and name; throws with the list of what exists otherwise. */
export function findObject<T = K8sObject>(all: readonly Manifest[], kind: string, name: string): T {
  const hit = all.filter((m) => m.obj.kind === kind && m.obj.metadata?.name === name);
  if (hit.length !== 1) {
    const have = all.filter((m) => m.obj.kind === kind).map((m) => m.obj.metadata?.name);
    throw new Error(`expected exactly one ${kind} "${name}", found ${hit.length} (have: ${have.join(', ') || 'none'})`);
  }
  return hit[0]!.obj as unknown as T;
}

export function objectsOf<T = K8sObject>(all: readonly Manifest[], kind: string): T[] {
  return all.filter((m) => m.obj.kind === kind).map((m) => m.obj as unknown as T);
}
