/**
 * `envoy --mode validate` on a config file: builds every listener, cluster and filter without
 * opening a socket. Output goes to a file beside the config, because access logs that open
 * /dev/stdout cannot open the socket Node would give the child as its stdout.
 */
import { spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';

export function envoyValidate(
  envoyBin: string,
  configFile: string,
  logLevel: 'error' | 'warn' = 'error',
): { status: number | null; log: string } {
  const logFile = `${configFile}.validate.log`;
  const fd = openSync(logFile, 'w');
  let status: number | null;
  try {
    status = spawnSync(envoyBin, ['--mode', 'validate', '-c', configFile, '--log-level', logLevel], {
      stdio: ['ignore', fd, fd],
      timeout: 60_000,
    }).status;
  } finally {
    closeSync(fd);
  }
  return { status, log: readFileSync(logFile, 'utf8').slice(-3000) };
}
