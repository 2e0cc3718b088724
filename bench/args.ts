/**
 * What every bench shares: the command line (integer flags with bounds, `--buffered`, `--out FILE`,
 * `--cpu-prof DIR` for the coordinator's V8 CPU profile, `--help`) and the stack it measures.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, type EnvoyBodyMode } from '../launch/envoy-bootstrap';
import { buildService, freeStackPorts, startLocalStack, type LocalStack, type LocalStackOptions } from '../launch/local-stack';
import { ensureEnvoy } from '../launch/envoy';

export interface IntFlag {
  /** As typed, without the dashes: `requests`, `max-seconds`. */
  readonly flag: string;
  readonly default: number;
  readonly min: number;
  readonly max: number;
  /** Shown in the usage after the default, e.g. `0 = skip`. */
  readonly note?: string;
}

export interface CommonBenchArgs {
  bodyMode: EnvoyBodyMode;
  out: string;
  cpuProfileDir?: string;
}

const COMMON_USAGE = "[--buffered] [--out FILE] [--cpu-prof DIR (the coordinator's V8 CPU profile)]";

/** `npm run bench -- <suite> [--requests N (400)] ... [--buffered] [--out FILE] [--cpu-prof DIR]`. */
export function benchUsage(suite: string, ints: Readonly<Record<string, IntFlag>>): string {
  const own = Object.values(ints).map((f) => `[--${f.flag} N (${f.default}${f.note ? `, ${f.note}` : ''})]`);
  return `usage: npm run bench -- ${suite} ${[...own, COMMON_USAGE].join(' ')}`;
}

export function parseBenchArgs<K extends string>(
  argv: readonly string[],
  suite: string,
  defaultOut: string,
  ints: Readonly<Record<K, IntFlag>>,
): CommonBenchArgs & Record<K, number> {
  const usage = benchUsage(suite, ints);
  const args = { bodyMode: 'full_duplex', out: defaultOut } as CommonBenchArgs & Record<K, number>;
  const byFlag = new Map<string, K>();
  for (const key of Object.keys(ints) as K[]) {
    (args as Record<K, number>)[key] = ints[key].default;
    byFlag.set(`--${ints[key].flag}`, key);
  }
  const value = (flag: string, v: string | undefined): string => {
    if (v === undefined || v === '') throw new Error(`${flag} needs a value\n${usage}`);
    return v;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const key = byFlag.get(a);
    if (key !== undefined) {
      const { min, max } = ints[key];
      const n = Number(value(a, argv[++i]));
      if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${a}: expected an integer ${min}-${max}`);
      (args as Record<K, number>)[key] = n;
    } else if (a === '--buffered') args.bodyMode = 'buffered';
    else if (a === '--out') args.out = value(a, argv[++i]);
    else if (a === '--cpu-prof') args.cpuProfileDir = value(a, argv[++i]);
    else if (a === '--help' || a === '-h') {
      process.stdout.write(`${usage}\n`);
      process.exit(0);
    } else throw new Error(`unexpected argument ${JSON.stringify(a)}\n${usage}`);
  }
  return args;
}

/**
 * The stack a bench measures: a fresh `.cache/bench-<suite>/`, Envoy installed, the coordinator
 * built and run as it ships, on free loopback ports, in the body mode and with the profile the
 * command line asked for. `extra` adds the suite's own stack options.
 */
export async function startBenchStack(
  suite: string,
  args: CommonBenchArgs,
  say: (msg: string) => void,
  extra: Partial<Omit<LocalStackOptions, 'dir' | 'ports' | 'bodyMode' | 'say' | 'cpuProfileDir' | 'builtService'>> = {},
): Promise<LocalStack> {
  const dir = join(REPO_ROOT, '.cache', `bench-${suite}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  ensureEnvoy();
  buildService(say);
  return startLocalStack({
    kvConnector: 'kv-shared-storage',
    ...extra,
    dir,
    ports: await freeStackPorts(),
    bodyMode: args.bodyMode,
    say,
    cpuProfileDir: args.cpuProfileDir,
    builtService: true,
  });
}
