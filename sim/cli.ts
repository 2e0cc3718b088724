/**
 * Runs one simulator from the command line (local stack, manual tests):
 *
 *   npx tsx sim/cli.ts --port 8300 --name sim-decode-0 --role decode --mode echo
 *   node dist/sim/cli.js --port 8300 --name sim-decode-0
 *
 * Prints `sim <name> listening on <url>` once ready; SIGTERM / SIGINT close it and exit 0.
 * Bad arguments print usage to stderr and exit 2.
 */

import { SimulatorConfigError } from './errors';
import { MODES, ROLES } from './options';
import { startSimulator } from './simulator';
import type { SimMode, SimRole, SimulatorOptions } from './types';

const USAGE = `usage: sim/cli.ts --port N --name NAME [--role ${ROLES.join('|')}] [--mode ${MODES.join('|')}]
       [--inter-token-latency-ms N] [--time-to-first-token-ms N] [--max-body-bytes N] [--host 127.0.0.1]
       [--honour-prefer-if-available true|false] [--prefix-tokens N] [--responses-render true|false]`;

const FLAGS = new Set([
  'port',
  'name',
  'role',
  'mode',
  'inter-token-latency-ms',
  'time-to-first-token-ms',
  'max-body-bytes',
  'host',
  'honour-prefer-if-available',
  'prefix-tokens',
  'responses-render',
]);

function boolArg(flag: string, value: string): boolean {
  if (value !== 'true' && value !== 'false') throw new SimulatorConfigError(`--${flag} must be true or false`);
  return value === 'true';
}

function intArg(flag: string, value: string): number {
  if (!/^\d{1,10}$/.test(value)) throw new SimulatorConfigError(`--${flag} must be a non-negative integer`);
  return Number(value);
}

/** Accepts `--flag value` and `--flag=value`; every flag takes a value. */
export function parseArgs(argv: readonly string[]): SimulatorOptions {
  const values = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new SimulatorConfigError(`unexpected argument "${arg}"`);
    const eq = arg.indexOf('=');
    const flag = eq >= 0 ? arg.slice(2, eq) : arg.slice(2);
    if (!FLAGS.has(flag)) throw new SimulatorConfigError(`unknown flag --${flag}`);
    const value = eq >= 0 ? arg.slice(eq + 1) : argv[++i];
    if (value === undefined) throw new SimulatorConfigError(`--${flag} needs a value`);
    values.set(flag, value);
  }
  const port = values.get('port');
  const name = values.get('name');
  if (port === undefined || name === undefined) throw new SimulatorConfigError('--port and --name are required');
  const opts: SimulatorOptions = { port: intArg('port', port), name };
  const host = values.get('host');
  if (host !== undefined) {
    if (host !== '127.0.0.1') throw new SimulatorConfigError('--host must be 127.0.0.1');
    opts.host = host;
  }
  const role = values.get('role');
  if (role !== undefined) opts.role = role as SimRole; // validated by startSimulator
  const mode = values.get('mode');
  if (mode !== undefined) opts.mode = mode as SimMode;
  const itl = values.get('inter-token-latency-ms');
  if (itl !== undefined) opts.interTokenLatencyMs = intArg('inter-token-latency-ms', itl);
  const ttft = values.get('time-to-first-token-ms');
  if (ttft !== undefined) opts.timeToFirstTokenMs = intArg('time-to-first-token-ms', ttft);
  const maxBody = values.get('max-body-bytes');
  if (maxBody !== undefined) opts.maxBodyBytes = intArg('max-body-bytes', maxBody);
  const honour = values.get('honour-prefer-if-available');
  if (honour !== undefined) opts.honourPreferIfAvailable = boolArg('honour-prefer-if-available', honour);
  const prefixTokens = values.get('prefix-tokens');
  if (prefixTokens !== undefined) opts.prefixTokens = intArg('prefix-tokens', prefixTokens);
  const responsesRender = values.get('responses-render');
  if (responsesRender !== undefined) opts.responsesRender = boolArg('responses-render', responsesRender);
  return opts;
}

async function main(): Promise<void> {
  let sim;
  try {
    sim = await startSimulator(parseArgs(process.argv.slice(2)));
  } catch (err) {
    if (err instanceof SimulatorConfigError) {
      process.stderr.write(`${err.message}\n${USAGE}\n`);
      process.exit(2);
    }
    throw err;
  }
  const running = sim;
  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    running.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdout.write(`sim ${running.name} listening on ${running.url}\n`);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`sim: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
