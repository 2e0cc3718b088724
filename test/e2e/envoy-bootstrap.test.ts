/**
 * The shipped Envoy bootstrap: the committed files are the template's default rendering, Envoy
 * 1.40 accepts them, and the internal gateway listener routes side calls by `epp-profile`.
 */
import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { COMMITTED_BOOTSTRAPS, EnvoyBootstrapError, renderEnvoyBootstrap, type EnvoyBodyMode } from '../../launch/envoy-bootstrap';
import { AccessLog } from '../support/access-log';
import { WORKER_STREAMS_PER_CONNECTION } from '../../launch/envoy-policy';
import { EnvoyStartError, ensureEnvoy, startEnvoy, type EnvoyHandle } from '../../launch/envoy';

describe('committed Envoy bootstraps', () => {
  it.each(Object.entries(COMMITTED_BOOTSTRAPS))('%s equals the template rendered with defaults', (mode, file) => {
    expect(readFileSync(file, 'utf8')).toBe(renderEnvoyBootstrap({ bodyMode: mode as EnvoyBodyMode }));
  });

  it.each(Object.values(COMMITTED_BOOTSTRAPS))('envoy --mode validate accepts %s', (file) => {
    // The default access log is /dev/stdout, which cannot be opened on the socket node gives a
    // child as stdout; give Envoy a real file, as a terminal or shell redirect would.
    const dir = mkdtempSync(join(tmpdir(), 'epd-validate-'));
    const out = join(dir, 'out.txt');
    const fd = openSync(out, 'w');
    try {
      const res = spawnSync(ensureEnvoy(), ['--mode', 'validate', '-c', file, '--disable-hot-restart'], {
        stdio: ['ignore', fd, fd],
        timeout: 30_000,
      });
      const text = readFileSync(out, 'utf8');
      expect(text).toMatch(/configuration '.*' OK/);
      expect(res.status).toBe(0);
    } finally {
      closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('full duplex streams the body with trailers; buffered raises the route buffer above 64 MiB', () => {
    const fd = renderEnvoyBootstrap({ bodyMode: 'full_duplex' });
    expect(fd).toMatch(/request_body_mode: FULL_DUPLEX_STREAMED\n\s+request_trailer_mode: SEND/);
    const buf = renderEnvoyBootstrap({ bodyMode: 'buffered' });
    expect(buf).toMatch(/request_body_mode: BUFFERED/);
    const limit = Number(/request_body_buffer_limit: (\d+)/.exec(buf)?.[1]);
    expect(limit).toBeGreaterThan(64 * 1024 * 1024);
  });

  it('binds admin and both listeners to loopback only', () => {
    const text = renderEnvoyBootstrap();
    const binds = [...text.matchAll(/socket_address: \{ address: ([^,]+), port_value: (8080|8081|19000) \}/g)].map((m) => m[1]);
    expect(binds).toEqual(['127.0.0.1', '127.0.0.1', '127.0.0.1']);
  });

  it('extProcWorkers > 1 caps the service cluster at a few streams per connection (the committed files, for one process, do not)', () => {
    const cap = (text: string) => /^\s+max_concurrent_streams: (\d+)$/m.exec(text)?.[1];
    expect(cap(renderEnvoyBootstrap())).toBeUndefined();
    expect(cap(renderEnvoyBootstrap({ extProcWorkers: 1 }))).toBeUndefined();
    expect(cap(renderEnvoyBootstrap({ extProcWorkers: 4 }))).toBe(String(WORKER_STREAMS_PER_CONNECTION));
    expect(() => renderEnvoyBootstrap({ extProcWorkers: 65 })).toThrow('extProcWorkers: expected an integer 1-64, got 65');
  });

  it("keeps Envoy's SO_REUSEPORT default on every listener; reusePort false turns it off on each", () => {
    const flags = (yaml: string) => [...yaml.matchAll(/enable_reuse_port: (\w+)/g)].map((m) => m[1]);
    for (const file of Object.values(COMMITTED_BOOTSTRAPS)) expect(flags(readFileSync(file, 'utf8'))).toEqual(['true', 'true', 'true']);
    expect(flags(renderEnvoyBootstrap({ reusePort: false }))).toEqual(['false', 'false', 'false']);
  });

  it('rejects addresses Envoy cannot use and unquotable log paths', () => {
    expect(() => renderEnvoyBootstrap({ decodeAddress: 'localhost:8300' })).toThrow(EnvoyBootstrapError);
    expect(() => renderEnvoyBootstrap({ extProcAddress: '127.0.0.1:0' })).toThrow(/extProcAddress/);
    expect(() => renderEnvoyBootstrap({ publicPort: 70000 })).toThrow(/publicPort/);
    expect(() => renderEnvoyBootstrap({ accessLogPath: 'a"b' })).toThrow(/accessLogPath/);
    expect(renderEnvoyBootstrap({ prefillAddress: '[::1]:8200' })).toContain('address: ::1, port_value: 8200');
  });
});

interface Seen {
  role: string;
  headers: IncomingMessage['headers'];
  body: string;
}

describe('gateway listener (real Envoy)', () => {
  let envoy: EnvoyHandle;
  let dir: string;
  const workers: Server[] = [];
  const seen: Seen[] = [];

  async function worker(role: string): Promise<string> {
    const srv = createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => {
        seen.push({ role, headers: req.headers, body: Buffer.concat(parts).toString() });
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ role }));
      });
    });
    workers.push(srv);
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const addr = srv.address();
    return `127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-envoy-'));
    envoy = await startEnvoy({
      dir,
      bootstrap: {
        encodeAddress: await worker('encode'),
        prefillAddress: await worker('prefill'),
        decodeAddress: await worker('decode'),
        // Nothing listens here: the public listener is not exercised in this file.
        extProcAddress: '127.0.0.1:9',
      },
    });
  });

  afterAll(async () => {
    await envoy?.stop();
    await Promise.all(workers.map((w) => new Promise((r) => w.close(r))));
    rmSync(dir, { recursive: true, force: true });
  });

  it.each(['encode', 'prefill', 'decode'])('epp-profile: %s reaches the workers of that role, with the request id', async (role) => {
    seen.length = 0;
    const res = await fetch(`${envoy.gatewayUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'epp-profile': role, 'x-request-id': `req-${role}` },
      body: '{"model":"m"}',
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ role });
    expect(seen).toHaveLength(1);
    expect(seen[0]!.role).toBe(role);
    expect(seen[0]!.headers['x-request-id']).toBe(`req-${role}`);
    expect(seen[0]!.body).toBe('{"model":"m"}');
    // suppress_envoy_headers: workers see no x-envoy-* bookkeeping.
    expect(Object.keys(seen[0]!.headers).filter((h) => h.startsWith('x-envoy-'))).toEqual([]);

    const line = await new AccessLog(envoy.accessLogPath).waitFor((e) => e.x_request_id === `req-${role}`);
    expect(line).toMatchObject({ listener: 'gateway', epp_profile: role, response_code: 200, upstream_cluster: `${role}_workers` });
    expect(line.upstream_host).toMatch(/^127\.0\.0\.1:\d+$/);
  });

  it("a second harness Envoy on a port this one holds fails to start (it does not take a share of this one's connections)", async () => {
    // With SO_REUSEPORT both would bind, and the kernel would hand the second some of the clients
    // that dialled the first: a CI flake where a test's requests reached another stack's gateway.
    // The second's public listener would answer them with an error (its ext_proc address is dead).
    const second: unknown = await startEnvoy({
      dir: join(dir, 'second'),
      bootstrap: { publicPort: envoy.gatewayPort, extProcAddress: '127.0.0.1:9' },
    }).catch((e: unknown) => e);
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 40; i++) statuses.push(await postOnNewConnection(`${envoy.gatewayUrl}/v1/completions`, 'decode'));
      expect(statuses).toEqual(statuses.map(() => 200));
    } finally {
      if (!(second instanceof Error)) await (second as EnvoyHandle).stop();
    }
    expect(second).toBeInstanceOf(EnvoyStartError);
    expect((second as EnvoyStartError).addressInUse).toBe(true);
  });

  it.each([[undefined], ['Decode '], ['render']])('epp-profile %p gets a 400 and reaches no worker', async (profile) => {
    seen.length = 0;
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (profile !== undefined) headers['epp-profile'] = profile;
    const res = await fetch(`${envoy.gatewayUrl}/v1/completions`, { method: 'POST', headers, body: '{}' });
    expect(res.status).toBe(400);
    expect(await res.text()).toMatch(/epp-profile/);
    expect(seen).toHaveLength(0);
  });
});

/** POST with a fresh TCP connection (no keep-alive agent), so that each request is a new accept. */
function postOnNewConnection(url: string, profile: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'POST', agent: false, headers: { 'epp-profile': profile, 'content-type': 'application/json' } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end('{}');
  });
}
