import { loadConfig } from './config/config';
import { ConfigError } from './config/errors';
import { createLogger } from './observability/logger';
import type { startService as StartService } from './service';
import cluster from 'node:cluster';
import { runPrimary } from './workers/primary';
import { workerRole } from './workers/worker';

/** Time allowed after the drain grace period for closing clients, listeners and exporters. */
const HARD_EXIT_MARGIN_MS = 10_000;

interface Args {
  config: string;
  verbosity?: number;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { config: 'config/coordinator.yaml' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const [flag, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = () => inline ?? argv[++i];
    if (flag === '--config' || flag === '-config') {
      const v = value();
      if (!v) throw new ConfigError('--config', 'a file path');
      args.config = v;
    } else if (flag === '-v' || flag === '--v') {
      const v = Number(value());
      if (!Number.isInteger(v)) throw new ConfigError('-v', 'an integer verbosity 1-5');
      args.verbosity = v;
    } else if (flag === '--help' || flag === '-h') {
      process.stdout.write('usage: epd-coordinator [--config config/coordinator.yaml] [-v N]\n');
      process.exit(0);
    } else {
      throw new ConfigError(a, 'one of --config, -v, --help');
    }
  }
  return args;
}

async function main(): Promise<void> {
  let args: Args;
  let config;
  try {
    args = parseArgs(process.argv.slice(2));
    config = loadConfig(args.config);
  } catch (err) {
    process.stderr.write(`epd-coordinator: configuration error: ${(err as Error).message}\n`);
    process.exit(1);
  }
  const log = createLogger(args.verbosity ?? config.logLevel);
  // server.workers > 1: this process only supervises; the workers (this same file, forked) serve.
  if (config.server.workers > 1 && cluster.isPrimary) {
    for (const w of config.warnings) log.warn(w);
    await runPrimary(config, log);
    return;
  }
  const worker = workerRole();
  if (!worker) for (const w of config.warnings) log.warn(w);

  let service: Awaited<ReturnType<typeof StartService>>;
  try {
    // Loaded here, not at the top: a cluster primary never needs the service (gRPC, steps, clients).
    const { startService } = await import('./service');
    service = await startService(config, { log, worker });
  } catch (err) {
    const msg = err instanceof ConfigError ? `configuration error: ${err.message}` : `start-up failed: ${(err as Error).message}`;
    log.fatal(msg);
    process.stderr.write(`epd-coordinator: ${msg}\n`);
    process.exit(1);
  }

  // First signal drains; a second one exits at once.
  let draining = false;
  const onSignal = (signal: NodeJS.Signals | 'primary') => {
    if (draining) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    draining = true;
    const { drainDelayMs, shutdownTimeoutMs } = config.server;
    log.info({ signal, active_streams: service.activeStreams(), drain_delay_ms: drainDelayMs, grace_ms: shutdownTimeoutMs }, 'draining');
    // close() is bounded by the grace period plus the exporters' own timeouts; never hang past that.
    setTimeout(
      () => {
        log.error('shutdown did not finish in time: exiting');
        process.exit(1);
      },
      drainDelayMs + shutdownTimeoutMs + HARD_EXIT_MARGIN_MS,
    ).unref();
    service.close().then(
      () => {
        log.info('stopped');
        log.flush?.();
        process.exit(0);
      },
      (err) => {
        log.error({ err: (err as Error).message }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  // A worker drains when the primary got the signal. A terminal's Ctrl-C reaches both: the
  // primary's message then finds this worker draining already and changes nothing.
  worker?.onDrain((second) => {
    if (second || !draining) onSignal('primary');
  });
  worker?.started();
  process.on('unhandledRejection', (reason) => log.error({ err: String(reason) }, 'unhandled rejection'));
}

void main();
