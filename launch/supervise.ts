/**
 * Child processes for `npm run stack` and `npm run bench`: started with their output in a log
 * file, ready when a line matches, stopped by PID (SIGTERM, then SIGKILL).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';

export interface ChildSpec {
  /** Shown in messages. */
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  /** stdout and stderr are appended here. */
  readonly logPath: string;
  /** Ready once a stdout/stderr line matches. */
  readonly ready: RegExp;
  readonly readyTimeoutMs?: number;
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
}

export interface Child {
  readonly name: string;
  readonly pid: number;
  /** Resolves when the process exits (code or signal). */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  isRunning(): boolean;
  /** SIGTERM, SIGKILL after `graceMs`; resolves once the process is gone. */
  stop(graceMs?: number): Promise<void>;
}

export class ChildStartError extends Error {
  override readonly name = 'ChildStartError';
}

const MAX_LINE = 64 * 1024;

/** Spawns `spec` in its own process group (a terminal Ctrl-C reaches only us; we stop it in order). */
export function startChild(spec: ChildSpec): Promise<Child> {
  const log = createWriteStream(spec.logPath, { flags: 'a' });
  const proc: ChildProcess = spawn(spec.command, [...spec.args], {
    cwd: spec.cwd,
    env: spec.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let running = true;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    proc.once('exit', (code, signal) => {
      running = false;
      resolve({ code, signal });
    });
  });
  // Safety net: a child must not outlive the supervisor, whatever way it ends.
  const kill = () => {
    if (running && proc.pid) {
      try {
        process.kill(proc.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  };
  process.once('exit', kill);
  void exited.then(() => process.off('exit', kill));

  const child: Child = {
    name: spec.name,
    pid: proc.pid ?? -1,
    exited,
    isRunning: () => running,
    stop: async (graceMs = 5000) => {
      if (!running || !proc.pid) return;
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };

  return new Promise<Child>((resolve, reject) => {
    let settled = false;
    let pending = '';
    const tail: string[] = [];
    const finish = (err?: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) {
        void child.stop(500).then(() => reject(err));
      } else {
        resolve(child);
      }
    };
    const onData = (chunk: Buffer) => {
      log.write(chunk);
      if (settled) return;
      pending += chunk.toString('utf8');
      if (pending.length > MAX_LINE) pending = pending.slice(-MAX_LINE);
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        tail.push(line);
        if (tail.length > 20) tail.shift();
        if (spec.ready.test(line)) return finish();
      }
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', onData);
    proc.once('error', (err) => finish(new ChildStartError(`${spec.name}: ${err.message}`)));
    void exited.then(({ code, signal }) => {
      log.end();
      finish(
        new ChildStartError(
          `${spec.name} exited during start-up (code ${String(code)}, signal ${String(signal)}); see ${spec.logPath}:\n${tail.join('\n')}`,
        ),
      );
    });
    const timer = setTimeout(
      () =>
        finish(
          new ChildStartError(`${spec.name} not ready after ${spec.readyTimeoutMs ?? 30_000} ms; see ${spec.logPath}:\n${tail.join('\n')}`),
        ),
      spec.readyTimeoutMs ?? 30_000,
    );
  });
}

/** Stops children in the given order (each by its PID). */
export async function stopAll(children: readonly Child[], graceMs?: number): Promise<void> {
  for (const c of children) await c.stop(graceMs);
}
