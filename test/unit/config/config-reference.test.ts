/**
 * docs/configuration.md is generated from the config schema; it must match what the generator
 * prints today, and cover every key and every step the service registers.
 */
import fs from 'node:fs';
import path from 'node:path';
import { REGENERATE_COMMAND, STEPS, renderConfigurationReference } from '../../../src/config/reference';
import { KEYS } from '../../../src/config/schema';
import { envName } from '../../../src/config/config';
import pino from 'pino';
import { BUILTIN_STEPS } from '../../../src/steps';
import type { StepDeps, StepParams } from '../../../src/pipeline/step';
import type { SideCallClient } from '../../../src/gateway/client';

const DOC = path.resolve(__dirname, '../../../docs/configuration.md');

/** Params a step cannot be built without, so that the factory gets past them and reads the rest. */
const SEED_PARAMS: Record<string, StepParams> = {
  'prefill-decode': { kv_connector: 'kv-sglang' },
  'async-broker': { redis_url: 'redis://127.0.0.1:1/0' },
};

const idle: SideCallClient = {
  baseUrl: 'http://127.0.0.1:1',
  post: () => Promise.reject(new Error('no side calls while building')),
  postStreaming: () => Promise.reject(new Error('no side calls while building')),
  close: async () => {},
};
const deps: StepDeps = {
  gateway: idle,
  clientFor: (baseUrl) => ({ ...idle, baseUrl }),
  gatewayTimeoutMs: 1000,
  log: pino({ level: 'silent' }),
  registerRoute: () => {},
};

/** Every param name a step's factory looks at, recorded through a proxy over its params. */
function paramsRead(type: string, seed: StepParams): string[] {
  const factory = BUILTIN_STEPS.find(([t]) => t === type)![1];
  const read = new Set<string>();
  const params = new Proxy({ ...seed }, {
    get(target, key, receiver) {
      if (typeof key === 'string') read.add(key);
      return Reflect.get(target, key, receiver) as unknown;
    },
    has(target, key) {
      if (typeof key === 'string') read.add(key);
      return Reflect.has(target, key);
    },
  });
  factory(params, deps);
  return [...read].sort();
}

describe('configuration reference', () => {
  test('docs/configuration.md is up to date with src/config/schema.ts and src/config/reference.ts', () => {
    const committed = fs.existsSync(DOC) ? fs.readFileSync(DOC, 'utf8') : '(missing)';
    const fresh = renderConfigurationReference();
    if (committed !== fresh) {
      throw new Error(`docs/configuration.md is stale. Regenerate it with:\n\n  ${REGENERATE_COMMAND}\n`);
    }
  });

  test('every key appears with its environment variable, type and meaning', () => {
    const page = renderConfigurationReference();
    for (const spec of KEYS) {
      const row = page.split('\n').find((l) => l.startsWith(`| \`${spec.key}\` |`));
      expect({ key: spec.key, row }).toEqual({ key: spec.key, row: expect.stringContaining(`\`${envName(spec.key)}\``) });
      expect(row).toContain(spec.doc.slice(0, 20).replace(/\|/g, '\\|'));
      if (spec.values) for (const v of spec.values) expect(row).toContain(v);
    }
  });

  test('a key added to the schema shows up in the page', () => {
    const extra = { key: 'server.example_knob', type: 'duration' as const, default: '5s', doc: 'An example.' };
    const page = renderConfigurationReference([...KEYS, extra]);
    expect(page).toContain('| `server.example_knob` | duration | `5s` | `COORDINATOR_SERVER_EXAMPLE_KNOB` | An example. |');
  });

  test('every step type the service registers has a params section', () => {
    const documented = STEPS.map((s) => s.type);
    for (const [type] of BUILTIN_STEPS) expect(documented).toContain(type);
  });

  test('every param a registered step reads is documented for that step', () => {
    for (const [type] of BUILTIN_STEPS) {
      if (type === 'async-broker') continue; // builds a Redis client; its params are checked by its own tests
      const documented = STEPS.find((s) => s.type === type)?.params.map((p) => p.name) ?? [];
      const undocumented = paramsRead(type, SEED_PARAMS[type] ?? {}).filter((k) => !documented.includes(k));
      expect({ type, undocumented }).toEqual({ type, undocumented: [] });
    }
  });

  test('table cells escape the pipe character', () => {
    const page = renderConfigurationReference([{ key: 'x.y', type: 'string', default: 'a|b', doc: 'one | two' }], []);
    expect(page).toContain('| `x.y` | string | `"a\\|b"` | `COORDINATOR_X_Y` | one \\| two |');
  });
});
