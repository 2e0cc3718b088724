/**
 * Arrows point one way. Parses every import in src/ (static, re-export and dynamic; type-only ones
 * too) and fails on (a) any import cycle between files and (b) any import between top-level src/
 * entries that LAYERS does not allow.
 *
 * The layering (each layer knows only the ones below it; README "Layout" names the folders):
 * - main.ts and service.ts wire everything and sit on top; server-tls.ts is a wiring helper, and
 *   self-signed-cert.ts (node:crypto only) makes its default certificate.
 * - workers (server.workers > 1: the cluster primary and the worker's IPC side) sits beside
 *   service.ts, under main.ts: it serves the summed /metrics, so it uses observability and config.
 * - observability implements the hooks the lower layers define (PipelineObserver, SideCallObserver,
 *   the stream observer), so it may import them; nothing below imports observability.
 * - extproc and the pipeline meet only at the Decision/RequestHandler seam: extproc may import
 *   pipeline/decision.ts (Decision, Exchange, RequestHandler, RequestHead) and two pure lists,
 *   pipeline/forward-headers.ts (the names a forward may set, which the header budget must count)
 *   and pipeline/hop-by-hop.ts (the one hop-by-hop list, which local replies skip); nothing else
 *   of the pipeline. The pipeline, steps and gateway never import extproc.
 * - steps use the pipeline (Step, RequestContext, errors, the side-call port), connectors, config,
 *   and gateway's capped body reader for media downloads; never extproc.
 * - gateway implements the pipeline's side-call port (pipeline/side-call.ts) and raises the
 *   pipeline's error kinds; the pipeline never imports gateway.
 * - config is at the bottom: it imports nothing of ours.
 */
import { readdirSync, readFileSync, statSync, existsSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import * as ts from 'typescript';

/** What each top-level entry of src/ may import: a folder or file name, or one file (`folder/file.ts`). */
const LAYERS: Record<string, readonly string[]> = {
  'main.ts': ['service.ts', 'workers', 'observability', 'config'],
  'service.ts': ['server-tls.ts', 'observability', 'extproc', 'steps', 'gateway', 'pipeline', 'config'],
  'server-tls.ts': ['config', 'self-signed-cert.ts'],
  'self-signed-cert.ts': [],
  workers: ['observability', 'config'],
  observability: ['extproc', 'gateway', 'pipeline', 'config'],
  extproc: ['pipeline/decision.ts', 'pipeline/forward-headers.ts', 'pipeline/hop-by-hop.ts'],
  steps: ['connectors', 'gateway', 'pipeline', 'config'],
  connectors: ['pipeline', 'config'],
  gateway: ['pipeline', 'config'],
  pipeline: ['config'],
  config: [],
};

const SRC = resolve(__dirname, '../../../src');

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sourceFiles(p));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

function resolveImport(from: string, spec: string): string | null {
  if (!spec.startsWith('.')) return null; // a package
  const base = resolve(dirname(from), spec);
  for (const candidate of [`${base}.ts`, join(base, 'index.ts'), base]) {
    if (existsSync(candidate) && statSync(candidate).isFile()) return candidate;
  }
  throw new Error(`${relative(SRC, from)}: cannot resolve import '${spec}'`);
}

/** src-relative file -> the src-relative files it imports. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sourceFiles(SRC)) {
    const info = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    const targets = info.importedFiles
      .map((f) => resolveImport(file, f.fileName))
      .filter((t): t is string => t !== null)
      .map((t) => relative(SRC, t));
    graph.set(relative(SRC, file), [...new Set(targets)]);
  }
  return graph;
}

/** Every cycle's files, one list per strongly connected component of more than one file (or a self-import). */
export function findCycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) cycles.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return cycles;
}

const topOf = (file: string): string => file.split('/')[0]!;

/** Imports between top-level entries that LAYERS does not allow, as `from -> to`. */
export function upwardImports(graph: ReadonlyMap<string, readonly string[]>, layers: Record<string, readonly string[]>): string[] {
  const bad: string[] = [];
  for (const [from, targets] of graph) {
    const a = topOf(from);
    for (const to of targets) {
      const b = topOf(to);
      if (a === b) continue;
      const allowed = layers[a];
      if (allowed === undefined) {
        bad.push(`${from} -> ${to} (src/${a} has no row in LAYERS)`);
        continue;
      }
      if (!allowed.includes(b) && !allowed.includes(to)) bad.push(`${from} -> ${to}`);
    }
  }
  return bad;
}

describe('src/ import structure', () => {
  const graph = importGraph();

  it('reads the real tree (the parser sees the imports it should)', () => {
    expect(graph.size).toBeGreaterThan(50);
    expect(graph.get('service.ts')).toEqual(expect.arrayContaining(['pipeline/handler.ts', 'extproc/server.ts']));
  });

  it('has no import cycle between files', () => {
    expect(findCycles(graph)).toEqual([]);
  });

  it('every top-level entry of src/ has a row in the layering table', () => {
    const tops = [...new Set([...graph.keys()].map(topOf))].sort();
    expect(tops).toEqual(Object.keys(LAYERS).sort());
  });

  it('has no import between top-level folders that the layering does not allow', () => {
    expect(upwardImports(graph, LAYERS)).toEqual([]);
  });

  it('the layering table itself has no cycle (it is a partial order)', () => {
    const folderGraph = new Map(Object.entries(LAYERS).map(([k, v]) => [k, v.map((t) => topOf(t))]));
    expect(findCycles(folderGraph)).toEqual([]);
  });

  it('the checks catch what they are for: a cycle and an upward import', () => {
    const g = new Map([
      ['pipeline/a.ts', ['pipeline/b.ts']],
      ['pipeline/b.ts', ['pipeline/a.ts', 'gateway/c.ts']],
      ['gateway/c.ts', []],
      ['extproc/d.ts', ['pipeline/a.ts', 'pipeline/decision.ts']],
    ]);
    expect(findCycles(g)).toEqual([['pipeline/a.ts', 'pipeline/b.ts']]);
    expect(upwardImports(g, LAYERS)).toEqual(['pipeline/b.ts -> gateway/c.ts', 'extproc/d.ts -> pipeline/a.ts']);
  });
});

/**
 * The repository's own folders, one level up: src/ is the product and imports none of them; sim/
 * (our worker simulator) stands alone; launch/ (the shared launchers: Envoy, the stacks, ports,
 * the topology generator) serves scripts/, bench/ and test/ and imports only src/ and sim/; test/
 * support code is for tests alone.
 */
const REPO = resolve(__dirname, '../../..');
const REPO_LAYERS: Record<string, readonly string[]> = {
  src: [],
  sim: [],
  launch: ['src', 'sim'],
  scripts: ['launch', 'src', 'sim'],
  bench: ['launch', 'src', 'sim'],
  test: ['launch', 'src', 'sim', 'scripts', 'bench'],
};

function repoImportGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const top of Object.keys(REPO_LAYERS)) {
    for (const file of sourceFiles(join(REPO, top))) {
      const info = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
      const targets: string[] = [];
      for (const f of info.importedFiles) {
        if (!f.fileName.startsWith('.')) continue;
        const base = resolve(dirname(file), f.fileName);
        const hit = [`${base}.ts`, join(base, 'index.ts'), base].find((c) => existsSync(c) && statSync(c).isFile());
        if (hit) targets.push(relative(REPO, hit));
      }
      graph.set(relative(REPO, file), targets);
    }
  }
  return graph;
}

describe('repository folder structure', () => {
  const graph = repoImportGraph();

  it('reads the real tree', () => {
    expect(graph.get('scripts/stack.ts')).toEqual(expect.arrayContaining(['launch/local-stack.ts']));
  });

  it('each folder imports only the folders below it; nothing outside test/ imports test/', () => {
    expect(upwardImports(graph, REPO_LAYERS)).toEqual([]);
  });

  it('the check catches an upward import', () => {
    const g = new Map([['launch/envoy.ts', ['test/support/redis.ts']]]);
    expect(upwardImports(g, REPO_LAYERS)).toEqual(['launch/envoy.ts -> test/support/redis.ts']);
  });
});
