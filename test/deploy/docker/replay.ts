/**
 * Replays the Dockerfile's stages into folders, one fake root per stage, without a Docker engine.
 * Only the RUN steps the project's Dockerfile uses are understood; any other fails loudly, so a new
 * build step cannot slip past the layout test unreplayed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { type Stage, parseCopy } from './dockerfile';
import { DockerIgnore } from './dockerignore';

export interface ReplayOptions {
  /** The build context (the repository root). */
  readonly context: string;
  /** Empty folder that receives one subfolder per stage. */
  readonly into: string;
  /** Already installed full dependency tree for the same lock file (the repository's node_modules). */
  readonly installedNodeModules: string;
  /** Bound for each npm run, ms. */
  readonly commandTimeoutMs: number;
}

export interface ReplayedStage {
  readonly name: string;
  /** Host folder standing for the stage's `/`. */
  readonly root: string;
  /** Container path of the last WORKDIR. */
  readonly workdir: string;
}

export class ReplayError extends Error {}

function hostPath(root: string, containerPath: string): string {
  return path.join(root, path.posix.normalize('/' + containerPath));
}

function copyTree(src: string, dest: string, skip: (abs: string) => boolean): void {
  if (skip(src)) return;
  const st = fs.lstatSync(src);
  if (st.isDirectory()) {
    fs.mkdirSync(dest, { recursive: true });
    for (const entry of fs.readdirSync(src)) copyTree(path.join(src, entry), path.join(dest, entry), skip);
  } else if (st.isSymbolicLink()) {
    fs.mkdirSync(path.dirname(dest), { recursive: true });
    fs.symlinkSync(fs.readlinkSync(src), dest);
  } else {
    fs.mkdirSync(path.dirname(dest), { recursive: true });
    fs.copyFileSync(src, dest);
  }
}

function run(cmd: string, args: string[], cwd: string, timeoutMs: number): void {
  const r = spawnSync(cmd, args, {
    cwd,
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...process.env, npm_config_update_notifier: 'false' },
  });
  if (r.error) throw new ReplayError(`${cmd} ${args.join(' ')} in ${cwd}: ${r.error.message}`);
  if (r.status !== 0) {
    const output = `${r.stdout ?? ''}\n${r.stderr ?? ''}`.trim().split('\n').slice(-30).join('\n');
    throw new ReplayError(`${cmd} ${args.join(' ')} exited ${r.status} in ${cwd}:\n${output}`);
  }
}

export function replay(stages: readonly Stage[], opts: ReplayOptions): Map<string, ReplayedStage> {
  const ignore = new DockerIgnore(fs.readFileSync(path.join(opts.context, '.dockerignore'), 'utf8'));
  const done = new Map<string, ReplayedStage>();
  stages.forEach((stage, index) => {
    const root = path.join(opts.into, `${index}-${stage.name}`);
    fs.mkdirSync(root, { recursive: true });
    let workdir = '/';
    for (const ins of stage.instructions) {
      const where = `Dockerfile line ${ins.line} (${stage.name})`;
      switch (ins.keyword) {
        case 'WORKDIR':
          workdir = path.posix.resolve(workdir, ins.args);
          fs.mkdirSync(hostPath(root, workdir), { recursive: true });
          break;
        case 'COPY': {
          const copy = parseCopy(ins.args);
          const destContainer = path.posix.resolve(workdir, copy.dest);
          const intoDir = copy.dest.endsWith('/') || copy.sources.length > 1;
          for (const src of copy.sources) {
            if (/[*?[]/.test(src)) throw new ReplayError(`${where}: wildcard sources are not replayed (${src})`);
            let from: string;
            let skip: (abs: string) => boolean;
            if (copy.from !== undefined) {
              const source = done.get(copy.from);
              if (!source) throw new ReplayError(`${where}: --from=${copy.from} names no earlier stage`);
              from = hostPath(source.root, path.posix.resolve(source.workdir, src));
              skip = () => false;
            } else {
              from = path.join(opts.context, src);
              const rel = (abs: string) => path.relative(opts.context, abs).split(path.sep).join('/');
              // The builder never sees an ignored path: copying one is an error, as in `docker build`.
              if (ignore.excludes(rel(from))) throw new ReplayError(`${where}: ${src} is excluded by .dockerignore`);
              skip = (abs) => ignore.excludes(rel(abs));
            }
            if (!fs.existsSync(from)) throw new ReplayError(`${where}: ${src} not found`);
            const isDir = fs.statSync(from).isDirectory();
            const dest = hostPath(root, intoDir && !isDir ? path.posix.join(destContainer, path.posix.basename(src)) : destContainer);
            copyTree(from, dest, skip);
          }
          break;
        }
        case 'RUN': {
          const cwd = hostPath(root, workdir);
          const words = ins.args.split(/\s+/);
          if (words[0] === 'npm' && words[1] === 'ci') {
            if (words.includes('--omit=dev')) {
              // The real install, from the local npm cache when it can.
              run(
                'npm',
                ['ci', '--omit=dev', '--ignore-scripts', '--prefer-offline', '--no-audit', '--no-fund'],
                cwd,
                opts.commandTimeoutMs,
              );
            } else {
              // A full install of the same lock file is what the repository already has.
              const repoLock = fs.readFileSync(path.join(opts.context, 'package-lock.json'));
              if (!repoLock.equals(fs.readFileSync(path.join(cwd, 'package-lock.json')))) {
                throw new ReplayError(`${where}: npm ci with a lock file other than the repository's`);
              }
              fs.symlinkSync(opts.installedNodeModules, path.join(cwd, 'node_modules'), 'dir');
            }
          } else if (ins.args === 'npm run build') {
            run('npm', ['run', 'build', '--silent'], cwd, opts.commandTimeoutMs);
          } else {
            throw new ReplayError(`${where}: RUN ${ins.args} is not replayed; teach test/deploy/docker/replay.ts`);
          }
          break;
        }
        // Image metadata, checked by the test rather than replayed.
        case 'ENV':
        case 'USER':
        case 'EXPOSE':
        case 'ENTRYPOINT':
        case 'CMD':
        case 'LABEL':
        case 'ARG':
          break;
        default:
          throw new ReplayError(`${where}: ${ins.keyword} is not replayed`);
      }
    }
    done.set(stage.name, { name: stage.name, root, workdir });
  });
  return done;
}
