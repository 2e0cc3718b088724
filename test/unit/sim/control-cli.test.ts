import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';

import { parseArgs } from '../../../sim/cli';
import { Simulator, SimulatorConfigError, startSimulator } from '../../../sim/simulator';
import { postJson, readJson } from './helpers';

describe('simulator: control API', () => {
  let sim: Simulator;
  beforeAll(async () => {
    sim = await startSimulator({ name: 'sim-ctl' });
  });
  afterAll(async () => {
    await sim.close();
  });

  it('lists recorded requests with json or base64 bodies, and does not record itself', async () => {
    await (await postJson(`${sim.url}/v1/completions`, { prompt: 'hello' }, { 'epp-profile': 'decode' })).text();
    await (await fetch(`${sim.url}/v1/completions`, { method: 'POST', body: 'not json' })).text();
    const listed = await readJson(await fetch(`${sim.url}/__sim/requests`));
    expect(listed.name).toBe('sim-ctl');
    expect(listed.requests).toHaveLength(2);
    expect(listed.requests[0]).toMatchObject({
      method: 'POST',
      path: '/v1/completions',
      json: { prompt: 'hello' },
      closedEarly: false,
      status: 200,
    });
    expect(listed.requests[0].headers['epp-profile']).toBe('decode');
    expect(Buffer.from(listed.requests[1].bodyBase64, 'base64').toString()).toBe('not json');
    expect(listed.requests[1].status).toBe(400);
    expect(sim.requests).toHaveLength(2);
  });

  it('sets faults over HTTP, refuses a bad rule, and resets', async () => {
    const bad = await postJson(`${sim.url}/__sim/faults`, [{ status: 'x' }]);
    expect(bad.status).toBe(400);
    expect((await readJson(bad)).error.message).toMatch(/status/);

    const set = await postJson(`${sim.url}/__sim/faults`, { rules: [{ match: { profile: 'prefill' }, status: 502, times: 1 }] });
    expect(await readJson(set)).toEqual({ ok: true, rules: 1 });
    const faulted = await postJson(`${sim.url}/v1/completions`, { prompt: 'x' }, { 'epp-profile': 'prefill' });
    expect(faulted.status).toBe(502);
    await faulted.text();
    expect((await readJson(await fetch(`${sim.url}/__sim/faults`))).rules).toEqual([]);

    await postJson(`${sim.url}/__sim/faults`, [{ status: 500 }]);
    const reset = await postJson(`${sim.url}/__sim/reset`, {});
    expect(reset.status).toBe(200);
    await reset.text();
    expect(sim.requests).toHaveLength(0);
    const healthy = await postJson(`${sim.url}/v1/completions`, { prompt: 'x' });
    expect(healthy.status).toBe(200);
    await healthy.text();
  });
});

describe('simulator: CLI', () => {
  it('parses flags in both forms and refuses unknown ones', () => {
    expect(parseArgs(['--port', '8300', '--name=sim-decode-0', '--role', 'decode', '--inter-token-latency-ms=5'])).toEqual({
      port: 8300,
      name: 'sim-decode-0',
      role: 'decode',
      interTokenLatencyMs: 5,
    });
    expect(() => parseArgs(['--port', '1', '--name', 'a', '--tensor-parallel-size', '2'])).toThrow(SimulatorConfigError);
    expect(() => parseArgs(['--port', '-1', '--name', 'a'])).toThrow(/--port/);
    expect(() => parseArgs(['--name', 'a'])).toThrow(/required/);
    expect(() => parseArgs(['--port', '1', '--name', 'a', '--host', '0.0.0.0'])).toThrow(/127\.0\.0\.1/);
    expect(parseArgs(['--port', '1', '--name', 'a', '--responses-render', 'true'])).toMatchObject({ responsesRender: true });
    expect(() => parseArgs(['--port', '1', '--name', 'a', '--responses-render', 'yes'])).toThrow(
      /--responses-render must be true or false/,
    );
  });

  it('starts, prints its URL, serves, and exits 0 on SIGTERM', async () => {
    const cli = join(__dirname, '../../../sim/cli.ts');
    const child = spawn(process.execPath, ['--import', 'tsx', cli, '--port', '0', '--name', 'sim-cli-0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      let out = '';
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          const match = /^sim sim-cli-0 listening on (http:\/\/127\.0\.0\.1:\d+)\n/.exec(out);
          if (match) resolve(match[1]);
        });
        child.once('exit', (code) => reject(new Error(`cli exited early with ${code}`)));
      });
      const res = await fetch(`${url}/health`);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-inference-pod')).toBe('sim-cli-0');
      await res.text();
      child.kill('SIGTERM');
      const [code] = await once(child, 'exit');
      expect(code).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});
