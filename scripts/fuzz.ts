/**
 * `npm run fuzz [-- --cases N] [--seed S]`: the fuzz suites (test/fuzz) with N cases in total
 * (default 100000) and a fresh seed, printed first so a failure can be replayed:
 *
 *   FUZZ_SEED=<seed> FUZZ_CASES=<N> npx jest test/fuzz   (add FUZZ_PATH=<path> from the report)
 *
 * CI runs the same suites from `npm test` with a fixed seed and 10000 cases.
 */
import { spawnSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { REPO_ROOT } from '../launch/envoy-bootstrap';

const USAGE = 'usage: npm run fuzz -- [--cases N (100000)] [--seed S (random)] [--level protocol|http]';

function main(): number {
  const argv = process.argv.slice(2);
  let cases = 100_000;
  let seed = randomInt(0, 2 ** 31 - 1);
  let level: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value\n${USAGE}`);
      return v;
    };
    switch (a) {
      case '--cases':
        cases = Number(value());
        if (!Number.isSafeInteger(cases) || cases < 1 || cases > 100_000_000)
          throw new Error(`--cases: expected a positive integer\n${USAGE}`);
        break;
      case '--seed':
        seed = Number(value());
        if (!Number.isSafeInteger(seed)) throw new Error(`--seed: expected an integer\n${USAGE}`);
        break;
      case '--level':
        level = value();
        if (level !== 'protocol' && level !== 'http') throw new Error(`--level: expected protocol or http\n${USAGE}`);
        break;
      case '-h':
      case '--help':
        process.stdout.write(`${USAGE}\n`);
        return 0;
      default:
        throw new Error(`unknown argument ${a}\n${USAGE}`);
    }
  }
  process.stdout.write(`fuzz: ${cases} cases, seed ${seed} (replay: FUZZ_SEED=${seed} FUZZ_CASES=${cases} npx jest test/fuzz)\n`);
  const started = Date.now();
  const files = level ? [`test/fuzz/${level}.fuzz.test.ts`] : ['test/fuzz'];
  const run = spawnSync('npx', ['jest', '--ci', ...files], {
    cwd: REPO_ROOT,
    stdio: 'inherit',
    env: { ...process.env, FUZZ_CASES: String(cases), FUZZ_SEED: String(seed) },
  });
  const minutes = ((Date.now() - started) / 60_000).toFixed(1);
  process.stdout.write(`fuzz: ${run.status === 0 ? 'passed' : 'FAILED'} after ${minutes} min; seed ${seed}, ${cases} cases\n`);
  return run.status ?? 1;
}

try {
  process.exitCode = main();
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exitCode = 2;
}
