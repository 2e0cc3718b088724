import pino from 'pino';
import type { Logger } from 'pino';
import { BatchedLogDestination } from './log-destination';

/** Upstream verbosity (1 warn, 2 info, 3 verbose, 4 debug, 5 trace) mapped to pino levels. */
export function levelFor(logLevel: number): pino.Level {
  if (logLevel <= 1) return 'warn';
  if (logLevel === 2) return 'info';
  if (logLevel <= 4) return 'debug';
  return 'trace';
}

/**
 * JSON logs to stderr, written in batches (log-destination.ts: why, and what an exit flushes).
 * Request-scoped loggers are children carrying `x-request-id`.
 */
export function createLogger(logLevel = 2, destination: pino.DestinationStream = new BatchedLogDestination(2)): Logger {
  return pino({ level: levelFor(logLevel), base: { logger: 'epd-coordinator' } }, destination);
}

/** A logger that drops everything, for tests and benchmarks. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
