import { execFileSync, spawnSync } from 'node:child_process';
import { tieringFlags } from '../../src/v8-tiering';

const major = Number(process.versions.node.split('.')[0]);

describe('V8 tier-up flags', () => {
  it('sets a lower interrupt budget on Node 20 and nothing on runtimes it was not measured on', () => {
    expect(tieringFlags(20)).toEqual(['--interrupt-budget=16384']);
    expect(tieringFlags(24)).toEqual([]);
    expect(tieringFlags(26)).toEqual([]);
  });

  it(`the flags for this runtime (Node ${major}) are ones its V8 knows and applies`, () => {
    const flags = tieringFlags(major);
    for (const flag of flags) {
      const name = flag.slice(2, flag.indexOf('='));
      // An unknown flag would not be listed, and setFlagsFromString would ignore it silently.
      expect(execFileSync(process.execPath, ['--v8-options'], { encoding: 'utf8' })).toContain(`--${name} `);
      const run = spawnSync(process.execPath, [flag, '-e', '0'], { encoding: 'utf8' });
      expect(run.stderr).toBe('');
      expect(run.status).toBe(0);
    }
  });
});
