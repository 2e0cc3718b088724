/**
 * Processes a compare run starts and watches: the Go peers (polled on a health URL, since they print
 * no fixed ready line), and what is read of every process from /proc: CPU time and resident memory.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { httpGet } from '../../launch/envoy';
import type { Child } from '../../launch/supervise';

export interface Proc {
  readonly name: string;
  readonly pid: number;
  stop(): Promise<void>;
}

export function childProc(c: Child): Proc {
  return { name: c.name, pid: c.pid, stop: () => c.stop() };
}

/**
 * CPU time of a process, all its threads, in seconds: the sum of each thread's run time in
 * /proc/<pid>/task/<tid>/schedstat (nanoseconds, so a block of a few requests is not lost in the
 * 10 ms clock ticks of /proc/<pid>/stat). A thread that ended takes its time with it; the services
 * measured here keep their threads for their whole life.
 */
export function cpuSeconds(pid: number): number {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return ns / 1e9;
}

/** Resident set size of a process, MB (VmRSS of /proc/<pid>/status). */
export function rssMb(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Math.round(Number(m[1]) / 102.4) / 10 : NaN;
}

async function waitHealthy(url: string, name: string, exited: () => boolean, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (exited()) throw new Error(`${name} exited during start-up`);
    try {
      if ((await httpGet(url, 1000)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${name}: ${url} not healthy after ${timeoutMs} ms`);
}

/** A Go peer: output to a log file, ready when `healthUrl` answers 200. */
export async function startPolled(
  name: string,
  command: string,
  args: string[],
  logPath: string,
  healthUrl: string,
  env: NodeJS.ProcessEnv = {},
): Promise<Proc> {
  const fd = openSync(logPath, 'a');
  const child = spawn(command, args, { stdio: ['ignore', fd, fd], detached: true, env: { ...process.env, ...env } });
  closeSync(fd);
  let gone = false;
  const exited = new Promise<void>((r) => child.once('exit', () => ((gone = true), r())));
  const kill = () => {
    if (!gone && child.pid) process.kill(child.pid, 'SIGKILL');
  };
  process.once('exit', kill);
  const proc: Proc = {
    name,
    pid: child.pid ?? -1,
    stop: async () => {
      if (gone) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(t);
    },
  };
  try {
    await waitHealthy(healthUrl, name, () => gone);
  } catch (err) {
    await proc.stop();
    throw new Error(`${(err as Error).message}; see ${logPath}`, { cause: err });
  }
  return proc;
}
