/**
 * A real redis-server for tests: loopback only, a free port, a temp dir, no persistence. It can be
 * stopped and restarted on the same port mid-test (the "Redis went away" faults).
 */
import { redisServerArgs } from '../../launch/redis-args';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';
import { freePort, isListening, sleep, waitUntil } from '../../launch/ports';

export const REDIS_SERVER_BIN = process.env['REDIS_SERVER_BIN'] ?? '/usr/bin/redis-server';

export interface RedisServerOptions {
  /** `notify-keyspace-events`; `''` turns notifications off. Default `Kl` (what the step needs). */
  readonly notifyKeyspaceEvents?: string;
  /** Extra `--name value` arguments. */
  readonly extraArgs?: readonly string[];
  /** Arguments before all others (a config file, then `--sentinel`, for a Sentinel). */
  readonly leadingArgs?: readonly string[];
}

export class RedisServer {
  private child: ChildProcess | undefined;
  private output = '';

  private constructor(
    readonly port: number,
    readonly dir: string,
    private readonly opts: RedisServerOptions,
  ) {}

  /** Starts a server on a free loopback port (retrying another port if the first is taken). */
  static async start(opts: RedisServerOptions = {}): Promise<RedisServer> {
    const dir = mkdtempSync(join(tmpdir(), 'epd-redis-'));
    let lastErr: unknown;
    for (let attempt = 0; attempt < 5; attempt++) {
      const server = new RedisServer(await freePort(), dir, opts);
      try {
        await server.launch();
        return server;
      } catch (err) {
        lastErr = err;
      }
    }
    rmSync(dir, { recursive: true, force: true });
    throw lastErr;
  }

  get host(): string {
    return '127.0.0.1';
  }

  /** `redis://127.0.0.1:<port>/<db>` */
  url(db = 0): string {
    return `redis://127.0.0.1:${this.port}/${db}`;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  private async launch(): Promise<void> {
    const args = [
      ...(this.opts.leadingArgs ?? []),
      ...redisServerArgs(this.port, this.dir, this.opts.notifyKeyspaceEvents ?? 'Kl'),
      '--daemonize',
      'no',
      '--protected-mode',
      'yes',
      '--maxmemory-policy',
      'noeviction',
      ...(this.opts.extraArgs ?? []),
    ];
    this.output = '';
    const child = spawn(REDIS_SERVER_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (b: Buffer) => {
      this.output = (this.output + b.toString()).slice(-4000);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    this.child = child;
    try {
      await waitUntil(
        async () => {
          if (child.exitCode !== null) throw new Error(`redis-server exited (${child.exitCode}): ${this.output}`);
          return isListening(this.port, 200);
        },
        `redis-server on port ${this.port}`,
        10_000,
        25,
      );
    } catch (err) {
      await this.stop();
      throw err;
    }
  }

  /** Stops the server (SIGTERM, then SIGKILL after 5 s) and waits for the port to close. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(killer);
    await waitUntil(async () => !(await isListening(this.port, 100)), `port ${this.port} to close`, 5000, 25);
  }

  /** SIGKILL, as a crashed host: nothing is flushed or handed over. Waits for the exit. */
  async kill(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGKILL');
    await exited;
  }

  /** Starts the server again on the same port and dir (data is gone: no persistence). */
  async restart(): Promise<void> {
    await this.stop();
    let lastErr: unknown;
    for (let attempt = 0; attempt < 20; attempt++) {
      try {
        await this.launch();
        return;
      } catch (err) {
        lastErr = err;
        await sleep(100);
      }
    }
    throw lastErr;
  }

  /** A plain client for assertions (close it with `quit()` or `disconnect()`). */
  client(db = 0): Redis {
    const c = new Redis({ host: '127.0.0.1', port: this.port, db, maxRetriesPerRequest: 1 });
    c.on('error', () => undefined); // reconnect noise while the server is stopped on purpose
    return c;
  }

  /** Stops the server and removes its temp dir. */
  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
