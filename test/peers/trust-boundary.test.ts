/**
 * Issue #12 item 4: the trust boundary against the real llm-d EPP, which is what a hostile header
 * used to kill (a latin-1 fairness id read into a Prometheus label: panic, then 502 for everyone).
 *
 * The stack is the no-Kubernetes topology (launch/epp-stack.ts): Envoy, epd-coordinator, the real
 * EPP (file discovery) and our own sim/ workers, which serve the vLLM gauges the EPP scrapes. Through
 * the public listener go every gateway header spoofed (and as latin-1 bytes), the path variants and
 * control paths of test/support/trust-cases.ts, and a seeded fuzz run of header cases sent as raw
 * HTTP/1.1 bytes. Afterwards the EPP must still be running, with its metrics answering, the
 * readiness gate open and no panic in its log; no client error may get a 5xx.
 *
 * Needs only `$PEERS_BIN/epp` (prebuilt; nothing here builds it); skipped with the reason otherwise.
 *
 * PEERS_TRUST_CASES  fuzz cases (default 300)
 * FUZZ_SEED          fast-check seed (default test/fuzz/support/settings.ts's fixed one)
 * PEERS_TRUST_CONTROL=1  also run the control: the latin-1 fairness id sent to the gateway listener,
 *                    where no coordinator screens it, must kill the EPP (proves the checks can fail;
 *                    it is the last case, as it leaves the EPP dead).
 */
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { Client } from 'undici';
import { EPP_STACK_MODEL, freeEppStackPorts, startEppStack, type EppStack, type EppStackPorts } from '../../launch/epp-stack';
import type { WorkerRole } from '../../launch/epp-topology';
import { KNOWN_CONTROL_PATHS, REFUSED_PATH_BODY } from '../../src/pipeline/path-policy';
import { GATEWAY_HEADERS } from '../../src/pipeline/header-policy';
import { fuzzSeed } from '../fuzz/support/settings';
import { LATIN1_VALUE, PATH_VARIANTS, spoofedGatewayHeaders } from '../support/trust-cases';
import { answerFits, expectedFor, headerCase, rawExchange, rawRequest } from '../support/trust-fuzz';

function skipReason(): string | undefined {
  const dir = process.env['PEERS_BIN'];
  if (!dir) return 'PEERS_BIN is unset';
  try {
    accessSync(join(dir, 'epp'), constants.X_OK);
    return undefined;
  } catch {
    return `PEERS_BIN=${dir} has no executable epp`;
  }
}

const skip = skipReason();
const suite = skip ? describe.skip : describe;
const WORKERS: WorkerRole[] = ['encode', 'prefill', 'decode'];
const CASES = Number(process.env['PEERS_TRUST_CASES'] ?? 300);
const MODEL = EPP_STACK_MODEL;
const chatBody = (content: string) => JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 4 });

suite(`trust boundary with the real llm-d EPP (PEERS_BIN)${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let dir: string;
  let ports: EppStackPorts;
  let stack: EppStack;
  let client: Client;
  let exitedFirst: string | undefined;
  /** What a clean request gets through this stack, by method (the chat, and GET /v1/models as the EPP serves it). */
  const baseline: Record<'POST' | 'GET', number> = { POST: 200, GET: 200 };
  let seq = 0;
  const nextId = (what: string) => `trust-${what}-${process.pid}-${++seq}`;

  const send = async (method: 'GET' | 'POST', path: string, headers: Record<string, string> = {}, base?: string) => {
    const c = base ? new Client(base) : client;
    try {
      // A prompt of its own: the EPP's prefix index never turns a case into a cache hit.
      const body = method === 'POST' ? chatBody(`trust ${path} ${++seq}`) : undefined;
      const res = await c.request({
        method,
        path,
        headers: { 'content-type': 'application/json', ...headers },
        body,
        headersTimeout: 30_000,
      });
      const text = await res.body.text();
      return { status: res.statusCode, headers: res.headers, text };
    } finally {
      if (base) await c.close();
    }
  };

  /** Everything the workers received (our sim's /__sim/requests, straight from each worker). */
  const workerHeaders = async (): Promise<Array<Record<string, string>>> => {
    const all: Array<Record<string, string>> = [];
    for (const e of stack.endpoints) {
      const res = await fetch(`http://127.0.0.1:${e.port}/__sim/requests`);
      const doc = (await res.json()) as { requests: Array<{ method: string; path: string; headers: Record<string, string> }> };
      // Not the EPP's own scrapes of the worker's gauges.
      all.push(
        ...doc.requests.filter((r) => !(r.method === 'GET' && (r.path === '/metrics' || r.path === '/health'))).map((r) => r.headers),
      );
    }
    return all;
  };
  const resetWorkers = async () => {
    for (const e of stack.endpoints) await (await fetch(`http://127.0.0.1:${e.port}/__sim/reset`, { method: 'POST' })).arrayBuffer();
  };

  const eppPid = () => stack.pids.find((p) => p.name === 'epp')!.pid;
  /** What "the EPP is alive" means here, as one comparable value. */
  const eppState = async () => {
    let running = exitedFirst !== 'epp';
    try {
      process.kill(eppPid(), 0);
    } catch {
      running = false;
    }
    const metrics = await fetch(stack.eppMetricsUrl, { signal: AbortSignal.timeout(3000) }).then(
      async (r) => r.status === 200 && (await r.text()).includes('llm_d_epp_ready_endpoints'),
      () => false,
    );
    const ready = (await stack.readiness()).ready;
    const panics = (readFileSync(stack.logs['epp']!, 'utf8').match(/panic:/g) ?? []).length;
    return { running, metrics, ready, panics };
  };
  const ALIVE = { running: true, metrics: true, ready: true, panics: 0 };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-trust-peers-'));
    ports = await freeEppStackPorts(WORKERS);
    stack = await startEppStack({
      dir,
      ports,
      eppBin: join(process.env['PEERS_BIN']!, 'epp'),
      conditionalDecode: true,
      readyTimeoutMs: 90_000,
    });
    void stack.firstExit.then((name) => (exitedFirst ??= name));
    client = new Client(stack.publicUrl);
  }, 180_000);

  afterAll(async () => {
    await client?.close();
    await stack?.stop();
    if (dir && !process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('the stack serves a chat through the EPP, and the EPP is alive', async () => {
    expect((await send('POST', '/v1/chat/completions', { 'x-request-id': nextId('warm') })).status).toBe(200);
    // A passthrough API (no body for the EPP to read the model from): whatever the EPP makes of it, a
    // hostile header must not change it.
    baseline.GET = (await send('GET', '/v1/models', { 'x-request-id': nextId('warm') })).status;
    expect(baseline.GET).toBeLessThan(500);
    expect(await eppState()).toEqual(ALIVE);
  });

  it('every gateway header as latin-1 bytes (the value that killed the EPP), one at a time and all together: 200, no worker sees it, the EPP lives', async () => {
    await resetWorkers();
    for (const name of GATEWAY_HEADERS.keys()) {
      const res = await send('POST', '/v1/chat/completions', { 'x-request-id': nextId('latin1'), [name]: LATIN1_VALUE });
      expect({ name, status: res.status }).toEqual({ name, status: 200 });
    }
    const all = {
      ...spoofedGatewayHeaders(),
      'x-gateway-inference-fairness-id': LATIN1_VALUE,
      'x-llm-d-inference-fairness-id': LATIN1_VALUE,
    };
    expect((await send('POST', '/v1/chat/completions', { 'x-request-id': nextId('all'), ...all })).status).toBe(200);
    // A request the pipeline does not run (passthrough to decode) loses them too.
    expect((await send('GET', '/v1/models', { 'x-request-id': nextId('models'), ...all })).status).toBe(baseline.GET);

    const legs = await workerHeaders();
    expect(legs.length).toBeGreaterThanOrEqual(GATEWAY_HEADERS.size * 2);
    const carried = legs.flatMap((h) =>
      Object.entries(h)
        .filter(([n, v]) => v.includes('\u00ff') || v.startsWith('spoofed-') || n.includes('fairness'))
        .map(([n]) => n),
    );
    expect(carried).toEqual([]);
    expect(await eppState()).toEqual(ALIVE);
  });

  it('a latin-1 value in any other header: our 400 naming it; no worker sees the request', async () => {
    await resetWorkers();
    const res = await send('POST', '/v1/chat/completions', { 'x-request-id': nextId('note'), 'x-client-note': LATIN1_VALUE });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text).error.message).toMatch(/^header "x-client-note" has a value that is not visible ASCII/);
    expect(await workerHeaders()).toEqual([]);
    expect(await eppState()).toEqual(ALIVE);
  });

  it("every known control path (GET and POST) is Envoy's 404, and every path variant gets its documented answer; no refused path reaches a worker", async () => {
    for (const path of KNOWN_CONTROL_PATHS) {
      for (const method of ['GET', 'POST'] as const) {
        await resetWorkers();
        const res = await send(method, path, { 'x-request-id': nextId('control') });
        expect({ method, path, status: res.status, body: res.text }).toEqual({ method, path, status: 404, body: REFUSED_PATH_BODY });
        expect({ path, legs: await workerHeaders() }).toEqual({ path, legs: [] });
      }
    }
    for (const [path, answer] of PATH_VARIANTS) {
      await resetWorkers();
      const res = await send('POST', path, { 'x-request-id': nextId('variant') });
      const legs = await workerHeaders();
      if (answer === 'pipeline') {
        expect({ path, status: res.status }).toEqual({ path, status: 200 });
        expect({ path, prefill: legs.some((h) => h['epp-profile'] === 'prefill') }).toEqual({ path, prefill: true });
      } else {
        expect({ path, status: res.status }).toEqual({ path, status: answer });
        expect({ path, legs }).toEqual({ path, legs: [] });
      }
    }
    expect(await eppState()).toEqual(ALIVE);
  }, 120_000);

  it(
    `seeded fuzz of header cases (${CASES}, PEERS_TRUST_CASES) as raw HTTP/1.1: each gets its documented answer, never a 5xx; the EPP lives`,
    async () => {
      const histogram: Record<string, number> = {};
      const byExpectation: Record<string, number> = {};
      const seed = fuzzSeed();
      let runs = 0;
      try {
        await fc.assert(
          fc.asyncProperty(headerCase, async (c) => {
            runs++;
            const id = nextId('fuzz');
            const status = await rawExchange(ports.public, rawRequest(c, id, MODEL));
            histogram[String(status)] = (histogram[String(status)] ?? 0) + 1;
            const expected = expectedFor(c);
            byExpectation[String(expected)] = (byExpectation[String(expected)] ?? 0) + 1;
            const want = expected === 200 ? baseline[c.method] : expected;
            const ok = answerFits(expected, status, baseline[c.method]);
            const shown = c.lines.map(([n, v]) => `${n}: ${v.slice(0, 60)}`);
            expect({ shown, status, want, ok }).toEqual({ shown, status, want, ok: true });
          }),
          { numRuns: CASES, seed, endOnFailure: true },
        );
      } finally {
        const state = await eppState();
        const summary = { cases: CASES, runs, seed, statuses: histogram, expected: byExpectation, epp: state, eppPid: eppPid() };
        process.stdout.write(`trust-boundary fuzz: ${JSON.stringify(summary)}\n`);
        if (process.env['PEERS_TRUST_REPORT']) writeFileSync(process.env['PEERS_TRUST_REPORT'], `${JSON.stringify(summary, null, 2)}\n`);
      }
      expect(await eppState()).toEqual(ALIVE);
      expect((await send('POST', '/v1/chat/completions', { 'x-request-id': nextId('after') })).status).toBe(200);
    },
    120_000 + CASES * 1500,
  );

  (process.env['PEERS_TRUST_CONTROL'] === '1' ? it : it.skip)(
    `control${process.env['PEERS_TRUST_CONTROL'] === '1' ? '' : ' (skipped: set PEERS_TRUST_CONTROL=1)'}: without the coordinator in front (the gateway listener), the latin-1 fairness id kills the EPP`,
    async () => {
      expect(await eppState()).toEqual(ALIVE);
      const res = await send(
        'POST',
        '/v1/chat/completions',
        { 'epp-profile': 'decode', 'x-gateway-inference-fairness-id': LATIN1_VALUE },
        stack.gatewayUrl,
      ).catch((err: Error) => ({ status: 0, text: err.message, headers: {} }));
      process.stdout.write(`trust-boundary control: gateway listener answered ${res.status}\n`);
      const deadline = Date.now() + 10_000;
      let state = await eppState();
      while (state.running && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 250));
        state = await eppState();
      }
      process.stdout.write(`trust-boundary control: EPP after the header: ${JSON.stringify(state)}\n`);
      expect(state.running).toBe(false);
      expect(state.panics).toBeGreaterThan(0);
      // From now on the public listener cannot schedule anything.
      expect((await send('POST', '/v1/chat/completions', {})).status).toBeGreaterThanOrEqual(500);
    },
    60_000,
  );
});
