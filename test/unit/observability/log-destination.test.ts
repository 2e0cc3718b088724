/**
 * The service's log lines (observability/log-destination.ts) are written in batches, and an exit
 * never loses them: each case runs the real logger in a child process and reads what reached its
 * stderr, as an operator's log collector would.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const LOGGER = join(__dirname, '..', '..', '..', 'src', 'observability', 'logger.ts');

/** Runs `body` in a child with `log` = createLogger(2); returns its stderr lines and status. */
function child(body: string): { lines: string[]; status: number | null; writes: number; stdout: string } {
  const script = `
    const { createLogger } = require(${JSON.stringify(LOGGER)});
    const fs = require('node:fs');
    let writes = 0;
    const real = fs.writeSync;
    fs.writeSync = function (fd, ...rest) { if (fd === 2) writes++; return real.call(fs, fd, ...rest); };
    process.on('exit', () => real.call(fs, 1, String(writes)));
    const log = createLogger(2);
    ${body}
  `;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], { encoding: 'utf8', timeout: 30_000 });
  const lines = r.stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => (JSON.parse(l) as { msg: string }).msg);
  const stdout = r.stdout.trim();
  return { lines, status: r.status, writes: Number(stdout.split(' ').pop()), stdout };
}

test('lines logged together reach stderr in order, in one write', () => {
  const r = child(`for (let i = 0; i < 50; i++) log.info('line ' + i); setTimeout(() => {}, 300);`);
  expect(r.lines).toEqual(Array.from({ length: 50 }, (_, i) => `line ${i}`));
  expect(r.writes).toBe(1);
});

test('a lone line is written within the flush interval, while the process keeps running', () => {
  // The child checks stderr's write count itself after 400 ms, then stays alive another 300 ms.
  const r = child(`
    log.info('alone');
    setTimeout(() => { real.call(fs, 1, 'seen:' + writes + ' '); }, 400);
    setTimeout(() => {}, 700);
  `);
  expect(r.stdout).toMatch(/^seen:1 /);
  expect(r.lines).toEqual(['alone']);
  expect(r.status).toBe(0);
});

test('after a quiet spell a line is written in the same turn of the event loop, not a flush interval later', () => {
  // Logged from a timer, as a request's line is logged from I/O; the check runs 10 ms later, well
  // inside the 100 ms flush interval, and the process then stays alive another 300 ms.
  const r = child(`
    setTimeout(() => {
      log.info('first');
      setTimeout(() => real.call(fs, 1, 'seen:' + writes + ' '), 10);
    }, 150);
    setTimeout(() => {}, 450);
  `);
  expect(r.stdout).toMatch(/^seen:1 /);
  expect(r.lines).toEqual(['first']);
});

test('a steady trickle of lines is still written in batches', () => {
  // A line every 5 ms for about 600 ms: at most two writes per 100 ms interval, not one per line.
  const r = child(`
    let i = 0;
    const t = setInterval(() => { log.info('tick ' + i); if (++i === 120) clearInterval(t); }, 5);
  `);
  expect(r.lines).toHaveLength(120);
  expect(r.writes).toBeLessThanOrEqual(16);
  expect(r.writes).toBeGreaterThan(1);
});

test('process.exit right after logging keeps the line', () => {
  const r = child(`log.info('before exit'); process.exit(3);`);
  expect(r.status).toBe(3);
  expect(r.lines).toEqual(['before exit']);
});

test('an uncaught exception right after logging keeps the line', () => {
  const r = child(`log.error('before the crash'); throw new Error('boom');`);
  expect(r.status).not.toBe(0);
  expect(r.lines).toEqual(['before the crash']);
});

test('many lines are written in batches, not one write each', () => {
  const r = child(`for (let i = 0; i < 2000; i++) log.info({ i, pad: 'x'.repeat(100) }, 'bulk');`);
  expect(r.lines).toHaveLength(2000);
  expect(r.writes).toBeGreaterThan(1);
  expect(r.writes).toBeLessThan(100);
});
