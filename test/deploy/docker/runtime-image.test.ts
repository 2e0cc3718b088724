/**
 * The Dockerfile's runtime image, rebuilt without a Docker engine: its stages are replayed into a
 * temporary folder (real `npm ci --omit=dev`, real `npm run build`), then the runtime stage's
 * layout is checked and the service is started from it.
 *
 * SLOW-ISH: one TypeScript build and one production install, typically 15-40 s.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import yaml from 'js-yaml';
import { type Stage, execForm, last, parseDockerfile } from './dockerfile';
import { DockerIgnore } from './dockerignore';
import { type ReplayedStage, replay } from './replay';
import { freePort, isListening } from '../../../launch/ports';
import { SHIPPED_NODE_FLAGS } from '../../../launch/service-node-flags';

const REPO_ROOT = path.resolve(__dirname, '../../..');
const dockerfileText = fs.readFileSync(path.join(REPO_ROOT, 'Dockerfile'), 'utf8');
const stages: Stage[] = parseDockerfile(dockerfileText);
const runtimeStage = stages[stages.length - 1]!;
const pkg = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };

jest.setTimeout(180_000);

let tmp: string;
let runtime: ReplayedStage;
/** The runtime stage's WORKDIR on the host: where the image's ENTRYPOINT runs. */
let app: string;

beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'epd-docker-'));
  const replayed = replay(stages, {
    context: REPO_ROOT,
    into: tmp,
    installedNodeModules: path.join(REPO_ROOT, 'node_modules'),
    commandTimeoutMs: 150_000,
  });
  runtime = replayed.get(runtimeStage.name)!;
  app = path.join(runtime.root, runtime.workdir);
});

afterAll(() => {
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

/** ENV lines of the runtime stage (`KEY=value` form). */
function imageEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const ins of runtimeStage.instructions.filter((i) => i.keyword === 'ENV')) {
    for (const pair of ins.args.split(/\s+/)) {
      const eq = pair.indexOf('=');
      if (eq > 0) env[pair.slice(0, eq)] = pair.slice(eq + 1);
    }
  }
  return env;
}

/** ENTRYPOINT minus the interpreter: the script and its fixed arguments, run with this test's Node. */
function entrypointScript(): string[] {
  const entry = execForm(last(runtimeStage, 'ENTRYPOINT')!.args)!;
  expect(path.basename(entry[0]!)).toBe('node');
  return entry.slice(1);
}

/** The host environment minus COORDINATOR_* overrides, which would change what the service loads. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('COORDINATOR_')) env[k] = v;
  return { ...env, ...imageEnv(), ...extra };
}

describe('Dockerfile', () => {
  test('builds and runs on Node 24 (package.json engines), the runtime on distroless nodejs24', () => {
    const engines = (JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { engines: { node: string } }).engines
      .node;
    expect(engines).toBe('>=24');
    const arg = (name: string) => new RegExp(`^ARG ${name}=(\\S+)$`, 'm').exec(dockerfileText)?.[1];
    expect(arg('BUILD_IMAGE')).toMatch(/^node:24-/);
    expect(arg('RUNTIME_IMAGE')).toMatch(/^gcr\.io\/distroless\/nodejs24-debian\d+:nonroot$/);
    // The replay below runs the entry point with this test's Node: it must be the same major.
    expect(Number(process.versions.node.split('.')[0])).toBeGreaterThanOrEqual(24);
  });

  test('is multi-stage: a build stage, a production-dependencies stage and a runtime stage', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    const runs = (s: Stage) => s.instructions.filter((i) => i.keyword === 'RUN').map((i) => i.args);
    expect(stages.some((s) => runs(s).some((r) => r.startsWith('npm run build')))).toBe(true);
    expect(stages.some((s) => runs(s).some((r) => /^npm ci\b.*--omit=dev/.test(r)))).toBe(true);
    // Nothing is installed or compiled in the runtime stage itself.
    expect(runs(runtimeStage)).toEqual([]);
  });

  test('the runtime stage runs as a numeric non-root user, exposes both ports and uses exec-form ENTRYPOINT and CMD', () => {
    const user = last(runtimeStage, 'USER')?.args ?? '';
    expect(user).toMatch(/^\d+(:\d+)?$/);
    expect(Number(user.split(':')[0])).toBeGreaterThan(0);
    const exposed = runtimeStage.instructions.filter((i) => i.keyword === 'EXPOSE').flatMap((i) => i.args.split(/\s+/));
    expect(exposed).toEqual(expect.arrayContaining(['50051', '9464']));
    expect(execForm(last(runtimeStage, 'ENTRYPOINT')!.args)).toBeDefined();
    expect(execForm(last(runtimeStage, 'CMD')!.args)).toBeDefined();
  });

  test('the image and scripts/start.sh run node with the flags the benchmarks measure', () => {
    // The benches and the local stack start the service with SHIPPED_NODE_FLAGS: what they measure
    // is what operators run only while both entry points carry exactly those flags.
    const entry = execForm(last(runtimeStage, 'ENTRYPOINT')!.args)!;
    expect(entry.slice(1).filter((a) => a.startsWith('-'))).toEqual([...SHIPPED_NODE_FLAGS]);
    const start = fs.readFileSync(path.join(REPO_ROOT, 'scripts/start.sh'), 'utf8');
    const exec = /^exec node (.*) dist\/src\/main\.js /m.exec(start);
    expect(exec?.[1]?.split(/\s+/)).toEqual([...SHIPPED_NODE_FLAGS]);
  });

  test('agrees with the Kubernetes Deployment on the user and the config path', () => {
    const docs = yaml.loadAll(fs.readFileSync(path.join(REPO_ROOT, 'config/k8s/coordinator.yaml'), 'utf8')) as {
      kind: string;
      spec: { template: { spec: { securityContext: { runAsUser: number }; containers: { args: string[] }[] } } };
    }[];
    const pod = docs.find((d) => d?.kind === 'Deployment')!.spec.template.spec;
    expect(Number(last(runtimeStage, 'USER')!.args.split(':')[0])).toBe(pod.securityContext.runAsUser);
    const cmd = execForm(last(runtimeStage, 'CMD')!.args)!;
    const k8sArgs = pod.containers[0]!.args;
    expect(cmd[cmd.indexOf('--config') + 1]).toBe(k8sArgs[k8sArgs.indexOf('--config') + 1]);
  });

  test('.dockerignore keeps local state and dependencies out of the build context', () => {
    const ignore = new DockerIgnore(fs.readFileSync(path.join(REPO_ROOT, '.dockerignore'), 'utf8'));
    for (const p of [
      'node_modules/jest/package.json',
      'dist/src/main.js',
      '.git/HEAD',
      '.tools/bin/egctl',
      'test/unit/x.test.ts',
      'a/b/debug.log',
      '.env',
    ]) {
      expect({ p, excluded: ignore.excludes(p) }).toEqual({ p, excluded: true });
    }
    for (const p of [
      'package.json',
      'package-lock.json',
      'tsconfig.json',
      'src/main.ts',
      'proto/envoy/service/ext_proc/v3/external_processor.proto',
      'config/coordinator.yaml',
    ]) {
      expect({ p, excluded: ignore.excludes(p) }).toEqual({ p, excluded: false });
    }
  });
});

describe('runtime image layout (replayed)', () => {
  test('holds the compiled service, the protos and package.json, and no sources or tests', () => {
    // The first argument that is not a node flag (the entrypoint caps V8's young generation).
    expect(
      fs.existsSync(
        path.join(
          app,
          entrypointScript().find((a) => !a.startsWith('-'))!,
        ),
      ),
    ).toBe(true);
    expect(fs.existsSync(path.join(app, 'dist/src/main.js'))).toBe(true);
    expect(fs.existsSync(path.join(app, 'proto/envoy/service/ext_proc/v3/external_processor.proto'))).toBe(true);
    expect(fs.existsSync(path.join(app, 'package.json'))).toBe(true);
    for (const absent of ['src', 'test', 'dist/test', 'tsconfig.json', 'node_modules/.bin/tsc']) {
      expect({ absent, exists: fs.existsSync(path.join(app, absent)) }).toEqual({ absent, exists: false });
    }
  });

  test('node_modules holds exactly the production part of the lock file', () => {
    const nm = path.join(app, 'node_modules');
    // A real folder, not a link to the repository's full install.
    expect(fs.lstatSync(nm).isDirectory()).toBe(true);
    for (const dep of Object.keys(pkg.dependencies)) {
      expect({ dep, present: fs.existsSync(path.join(nm, dep, 'package.json')) }).toEqual({ dep, present: true });
    }
    // The lock file marks what only development needs; a production dependency may still pull in a
    // package that is also a devDependency here (protobufjs needs @types/node).
    const lock = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { dev?: boolean; optional?: boolean; devOptional?: boolean }>;
    };
    const devOnly = Object.entries(lock.packages)
      .filter(([k, v]) => k.startsWith('node_modules/') && v.dev)
      .map(([k]) => k);
    expect(devOnly).toEqual(expect.arrayContaining(['node_modules/jest', 'node_modules/typescript', 'node_modules/ts-jest']));
    for (const key of devOnly) {
      expect({ key, present: fs.existsSync(path.join(app, key)) }).toEqual({ key, present: false });
    }
    for (const [key, v] of Object.entries(lock.packages)) {
      if (!key.startsWith('node_modules/') || v.dev || v.optional || v.devOptional) continue;
      expect({ key, present: fs.existsSync(path.join(app, key)) }).toEqual({ key, present: true });
    }
  });

  test('the service answers --help from the runtime folder', () => {
    const r = spawnSync(process.execPath, [...entrypointScript(), '--help'], {
      cwd: app,
      encoding: 'utf8',
      env: cleanEnv({}),
      timeout: 20_000,
    });
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(/^usage: epd-coordinator/);
    expect(r.status).toBe(0);
  });

  test('the service starts from the runtime folder with the shipped sample config, and stops on SIGTERM', async () => {
    const port = await freePort();
    // What the process loaded, written at exit: proto-loader, protobufjs and ioredis stay out of a
    // service that needs none of them (README, Memory: they cost RSS for as long as it lives), and
    // grpc-health-check, a development dependency, is not even installed here.
    const loadedFile = path.join(tmp, 'loaded-packages.json');
    const preload = path.join(tmp, 'record-loaded.js');
    fs.writeFileSync(
      preload,
      `process.on('exit', () => require('node:fs').writeFileSync(${JSON.stringify(loadedFile)}, JSON.stringify(Object.keys(require.cache))));\n`,
    );
    const child = spawn(process.execPath, ['--require', preload, ...entrypointScript(), '--config', 'config/coordinator.yaml'], {
      cwd: app,
      env: cleanEnv({ COORDINATOR_SERVER_LISTEN_ADDR: `127.0.0.1:${port}`, COORDINATOR_SERVER_SHUTDOWN_TIMEOUT: '2s' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      // Up = the port accepts connections and the start-up line is out (main installs its signal
      // handlers right after start-up, so a SIGTERM sent earlier would kill the process outright).
      let up = false;
      for (let i = 0; i < 100 && !up && child.exitCode === null; i++) {
        up = /listening/.test(output) && (await isListening(port, 200));
        if (!up) await new Promise((r) => setTimeout(r, 100));
      }
      expect({ listening: up, output }).toEqual({ listening: true, output: expect.any(String) });
      child.kill('SIGTERM');
      expect({ exitCode: await exited, output }).toEqual({ exitCode: 0, output: expect.any(String) });
      const packages = new Set(
        (JSON.parse(fs.readFileSync(loadedFile, 'utf8')) as string[]).flatMap(
          (f) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(f)?.[1] ?? [],
        ),
      );
      expect(packages).toContain('@grpc/grpc-js');
      for (const pkg of ['@grpc/proto-loader', 'protobufjs', 'grpc-health-check', 'ioredis']) expect(packages).not.toContain(pkg);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});
