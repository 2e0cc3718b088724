/**
 * gateway/undici-core.ts: the classes the service uses are undici's own, and loading the whole
 * service leaves undici's index (fetch, WebSocket, caches, mocks: about 6 MB of heap) unloaded.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import * as undici from 'undici';
import { buildConnector, errors, UndiciClient, UndiciDispatcher, undiciRequest } from '../../../src/gateway/undici-core';

const ROOT = join(__dirname, '..', '..', '..');

test('the classes are the ones undici exports, so instanceof and its error classes hold', () => {
  expect(UndiciClient).toBe(undici.Client);
  expect(UndiciDispatcher).toBe(undici.Dispatcher);
  expect(buildConnector).toBe(undici.buildConnector);
  expect(errors).toBe(undici.errors);
  expect(undiciRequest).toBe(undici.Dispatcher.prototype.request);
});

test("loading the service loads undici's client modules but not its index", () => {
  // A fresh process: jest's own module registry is not Node's require cache.
  const probe = [
    "require('./src/service.ts');",
    'const undici = Object.keys(require.cache).filter((k) => /[\\\\/]node_modules[\\\\/]undici[\\\\/]/.test(k));',
    'console.log(JSON.stringify({ files: undici.length, index: undici.some((k) => /[\\\\/]undici[\\\\/]index\\.js$/.test(k)) }));',
  ].join('\n');
  const run = spawnSync(process.execPath, ['--import', 'tsx', '-e', probe], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  expect(run.stderr).toBe('');
  const loaded = JSON.parse(run.stdout.trim()) as { files: number; index: boolean };
  expect(loaded.files).toBeGreaterThan(0);
  expect(loaded.index).toBe(false);
});
