/**
 * The fault matrix (issue #8), through the real Envoy: every phase (media download, render, encode,
 * prefill, decode) x every fault (4xx, 5xx, connect refused, timeout, hang, reset mid-body, slow
 * body). Each cell checks the status upstream's classifier gives (`classifyPipelineError`), an
 * OpenAI-style error body with no upstream text, no unhandled rejection, and the service back at 0
 * streams in flight.
 *
 * Not in the matrix: conditional-decode (not registered in src/steps/index.ts yet; its probe shares
 * the decode profile, so its faults belong with its own suite).
 */
import type { ServerResponse } from 'node:http';
import { startSimulator, type FaultRule, type Simulator } from '../../sim/simulator';
import { at, TestClient, type ClientResponse } from '../../launch/client';
import { REFUSED_PORT, sleep } from '../../launch/ports';
import { startStack, type Role, type Stack } from '../support/stack';
import { ImageServer, PNG_BYTES } from '../unit/steps/media/image-server';
import { expectIdle, expectOpenAiError, trackUnhandledRejections, UPSTREAM_SECRET } from './support/expect';

type Fault = '4xx' | '5xx' | 'refused' | 'timeout' | 'hang' | 'reset mid-body' | 'slow body';
type Phase = 'media' | 'render' | 'encode' | 'prefill' | 'decode';
const FAULTS: readonly Fault[] = ['4xx', '5xx', 'refused', 'timeout', 'hang', 'reset mid-body', 'slow body'];

/** Timeouts of the stack: short, so timeout and hang cells stay fast. */
const TIMEOUT_MS = 500;
/**
 * gateway.timeout. Longer than TIMEOUT_MS: a worker reset mid-body reaches us only after Envoy's
 * delayed close of the gateway connection (1 s by default), and prefill's total bound
 * (2 x gateway.timeout) must outlast it for the reset to be seen as a reset.
 */
const GATEWAY_TIMEOUT_MS = 1000;

/**
 * What the client gets. `error`: our OpenAI error with that status. `relay`: the decode worker's
 * own answer passes through Envoy (upstream relays decode's answer verbatim too). `ok`: 200 and the
 * right content. `aborted`: the client's connection is cut (a decode stream that broke after its
 * headers).
 */
type Expect = { error: number } | { relay: number } | 'ok' | 'aborted' | 'client-timeout';

const EXPECTED: Record<Phase, Record<Fault, Expect>> = {
  // As upstream: every download failure that is not a guard or size violation is a 502 (the
  // image host's problem, not the client's).
  media: {
    '4xx': { error: 502 },
    '5xx': { error: 502 },
    refused: { error: 502 },
    timeout: { error: 502 },
    hang: { error: 502 },
    'reset mid-body': { error: 502 },
    'slow body': 'ok',
  },
  render: {
    '4xx': { error: 429 },
    '5xx': { error: 502 },
    refused: { error: 502 },
    timeout: { error: 502 },
    hang: { error: 502 },
    'reset mid-body': { error: 502 },
    'slow body': 'ok',
  },
  encode: {
    '4xx': { error: 429 },
    '5xx': { error: 502 },
    refused: { error: 502 },
    timeout: { error: 502 },
    hang: { error: 502 },
    'reset mid-body': { error: 502 },
    'slow body': 'ok',
  },
  prefill: {
    '4xx': { error: 429 },
    '5xx': { error: 502 },
    refused: { error: 502 },
    timeout: { error: 502 },
    hang: { error: 502 },
    'reset mid-body': { error: 502 },
    'slow body': 'ok',
  },
  // Decode is Envoy's forward: its statuses are relayed; connect failure is Envoy's own 503; Envoy's
  // route has no timeout (streams), so a slow decode is simply slow and a hung one waits for the client.
  decode: {
    '4xx': { relay: 429 },
    '5xx': { relay: 503 },
    refused: { relay: 503 },
    timeout: 'ok',
    hang: 'client-timeout',
    'reset mid-body': 'aborted',
    'slow body': 'ok',
  },
};

/** The sim fault rule for a fault, where a sim plays the phase. */
function simRule(fault: Fault): FaultRule | null {
  switch (fault) {
    case '4xx':
      return { status: 429, body: `${UPSTREAM_SECRET} quota` };
    case '5xx':
      return { status: 503, body: `${UPSTREAM_SECRET} overloaded` };
    case 'timeout':
      return { delayMs: GATEWAY_TIMEOUT_MS + 500 };
    case 'hang':
      return { hang: true };
    case 'reset mid-body':
      return { resetMidBody: true };
    case 'slow body':
      return { chunkDelayMs: 100 };
    case 'refused':
      return null;
  }
}

/** The image host's behaviour for a fault. */
function imageRoute(fault: Fault): (res: ServerResponse) => void {
  switch (fault) {
    case '4xx':
      return (res) => res.writeHead(404, { 'content-type': 'text/plain' }).end(UPSTREAM_SECRET);
    case '5xx':
      return (res) => res.writeHead(503, { 'content-type': 'text/plain' }).end(UPSTREAM_SECRET);
    case 'timeout':
      return (res) =>
        void setTimeout(() => !res.destroyed && res.writeHead(200, { 'content-type': 'image/png' }).end(PNG_BYTES), TIMEOUT_MS + 500);
    case 'hang':
      return () => undefined;
    case 'reset mid-body':
      return (res) => {
        res.writeHead(200, { 'content-type': 'image/png', 'content-length': 1000 });
        res.write(PNG_BYTES.subarray(0, 10), () => setTimeout(() => res.socket?.destroy(), 10));
      };
    case 'slow body':
      return (res) => {
        res.writeHead(200, { 'content-type': 'image/png', 'content-length': PNG_BYTES.length });
        let off = 0;
        const tick = (): void => {
          if (res.destroyed) return;
          res.write(PNG_BYTES.subarray(off, off + 20));
          off += 20;
          if (off >= PNG_BYTES.length) res.end();
          else setTimeout(tick, 50);
        };
        tick();
      };
    case 'refused':
      return (res) => res.end();
  }
}

const SIM_OF: Record<Exclude<Phase, 'media'>, Role> = { render: 'render', encode: 'encode', prefill: 'prefill', decode: 'decode' };

describe.each(['full_duplex', 'buffered'] as const)('fault matrix through Envoy (%s)', (bodyMode) => {
  let stack: Stack;
  let client: TestClient;
  let images: ImageServer;
  let rejections: ReturnType<typeof trackUnhandledRejections>;
  let seq = 0;

  beforeAll(async () => {
    rejections = trackUnhandledRejections();
    images = await new ImageServer().start();
    stack = await startStack({
      bodyMode,
      gatewayTimeout: `${GATEWAY_TIMEOUT_MS}ms`,
      steps: ({ render }) => [
        { type: 'replace-media-urls', params: { download_timeout: `${TIMEOUT_MS}ms`, allowed_ip_ranges: ['127.0.0.1/32'] } },
        { type: 'render', params: { address: render, timeout: `${TIMEOUT_MS}ms` } },
        { type: 'encode' },
        { type: 'prefill' },
        { type: 'decode' },
      ],
    });
    client = new TestClient(stack.publicUrl);
    // Warm every path once, so no cell measures a cold start.
    expect((await client.post('/v1/chat/completions', body('encode'))).status).toBe(200);
  });
  afterAll(async () => {
    await client?.close();
    await stack?.close();
    await images?.stop();
    rejections?.dispose();
  });
  beforeEach(() => {
    stack.reset();
    images.reset();
  });
  afterEach(async () => {
    await expectIdle(stack.service);
    expect(rejections.seen).toEqual([]);
  });

  /** A chat request with one image: by URL (the media phase), else inline. */
  function body(phase: Phase): Record<string, unknown> {
    const url = phase === 'media' ? `${images.url}/img.png` : `data:image/png;base64,${PNG_BYTES.toString('base64')}`;
    return {
      model: 'sim-model',
      max_tokens: 4,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this' },
            { type: 'image_url', image_url: { url } },
          ],
        },
      ],
    };
  }

  /** Stops the phase's simulator (connections refused) and brings it back on the same port after `run`. */
  async function withSimDown<T>(role: Role, run: () => Promise<T>): Promise<T> {
    const sims = stack.sims as Record<Role, Simulator>;
    const old = sims[role];
    await old.close();
    try {
      return await run();
    } finally {
      sims[role] = await startSimulator({ name: old.name, role: old.role, port: old.port });
    }
  }

  async function send(phase: Phase, fault: Fault, opts: { timeoutMs?: number } = {}): Promise<ClientResponse> {
    const id = `matrix-${bodyMode}-${phase}-${fault.replace(/\W/g, '')}-${++seq}`;
    const req = (b: Record<string, unknown>) =>
      client.post('/v1/chat/completions', b, { headers: { 'x-request-id': id }, timeoutMs: opts.timeoutMs ?? 10_000 });
    if (phase === 'media') {
      const route = imageRoute(fault);
      images.on('/img.png', (_req, res) => route(res));
      const b = body(phase);
      if (fault === 'refused')
        (b['messages'] as Array<{ content: Array<{ image_url?: { url: string } }> }>)[0]!.content[1]!.image_url!.url =
          `http://127.0.0.1:${REFUSED_PORT}/img.png`;
      return req(b);
    }
    const role = SIM_OF[phase];
    if (fault === 'refused') return withSimDown(role, () => req(body(phase)));
    stack.sims[role].setFaults([simRule(fault)!]);
    return req(body(phase));
  }

  // The error paths do not depend on the phase, only on the body mode's answer message: buffered
  // mode runs one side-call phase and the forwarded decode, to keep the suite quick.
  const phases: readonly Phase[] = bodyMode === 'full_duplex' ? ['media', 'render', 'encode', 'prefill', 'decode'] : ['prefill', 'decode'];
  for (const phase of phases) {
    for (const fault of FAULTS) {
      const expected = EXPECTED[phase][fault];
      it(`${phase} x ${fault} -> ${JSON.stringify(expected)}`, async () => {
        if (expected === 'aborted') {
          await expect(send(phase, fault)).rejects.toThrow();
          return;
        }
        if (expected === 'client-timeout') {
          await expect(send(phase, fault, { timeoutMs: 500 })).rejects.toThrow();
          // Envoy resets the upstream request when the client gives up.
          await stack.sims.decode.waitForClose(() => true, 2000);
          return;
        }
        const res = await send(phase, fault);
        if (expected === 'ok') {
          expect(res.status).toBe(200);
          expect(at(res.json, 'choices', 0, 'message', 'content')).toEqual(expect.stringContaining('what is this'));
        } else if ('error' in expected) {
          expectOpenAiError(res, expected.error);
          const message = String(at(res.json, 'error', 'message'));
          if (expected.error === 429)
            expect(message).toMatch(new RegExp(`^${phase === 'encode' ? 'encode\\[0\\]' : phase} rejected the request: HTTP 429`));
          else expect(message).toMatch(/^internal error/);
          // Nothing after the failed phase ran.
          if (phase !== 'prefill') expect(stack.sims.prefill.requests).toHaveLength(0);
          expect(stack.sims.decode.requests).toHaveLength(0);
        } else {
          expect(res.status).toBe(expected.relay);
        }
        if (phase === 'prefill' && fault !== 'refused') {
          // Failover: connect failures, resets and 5xx are sent once more; 4xx and timeouts are not.
          const retried = fault === '5xx' || fault === 'reset mid-body';
          expect(stack.sims.prefill.requests).toHaveLength(retried ? 2 : 1);
        }
      });
    }
  }

  it('a prefill trickling its body past twice the gateway timeout is cut off (502)', async () => {
    // Four pieces, three pauses of 2 x gateway.timeout: the second piece is already past the bound
    // (with a wide margin, so a busy machine cannot let the whole body in first).
    stack.sims.prefill.setFaults([{ chunkDelayMs: 2 * GATEWAY_TIMEOUT_MS }]);
    const res = await client.post('/v1/chat/completions', body('prefill'));
    expectOpenAiError(res, 502);
    expect(stack.sims.prefill.requests).toHaveLength(1);
  });

  it('an encode trickling its body past twice the gateway timeout is cut off (502)', async () => {
    // As for prefill: the encoder's answer comes in four pieces, 2 x gateway.timeout apart.
    stack.sims.encode.setFaults([{ chunkDelayMs: 2 * GATEWAY_TIMEOUT_MS }]);
    const res = await client.post('/v1/chat/completions', body('encode'));
    expectOpenAiError(res, 502);
    expect(stack.sims.encode.requests).toHaveLength(1);
    expect(stack.sims.prefill.requests).toHaveLength(0);
  });

  describe('a client that goes away aborts the outstanding side call within 100 ms', () => {
    async function abortDuring(arrived: () => Promise<void>, closed: () => Promise<void>, phase: Phase): Promise<number> {
      const controller = new AbortController();
      const pending = client.post('/v1/chat/completions', body(phase), { signal: controller.signal }).catch((err: unknown) => err);
      await arrived();
      const t0 = performance.now();
      controller.abort();
      await closed();
      const elapsed = performance.now() - t0;
      // The client saw its own abort, not an answer.
      expect((await pending) as { name?: string }).toMatchObject({ name: 'AbortError' });
      return elapsed;
    }

    /**
     * The abort crosses four hops (client -> Envoy -> gRPC stream -> side call -> worker), all on
     * loopback. A GC pause or a busy CPU can stretch one run, so the bound must hold in one of two.
     */
    async function fastest(run: () => Promise<number>): Promise<number> {
      const first = await run();
      if (first < 100) return first;
      stack.reset();
      images.reset();
      return Math.min(first, await run());
    }

    it.each(phases.filter((p): p is Exclude<Phase, 'media'> => p !== 'media'))('%s', async (phase) => {
      const elapsed = await fastest(async () => {
        const sim = stack.sims[SIM_OF[phase]];
        sim.setFaults([{ hang: true }]);
        return abortDuring(
          async () => void (await sim.waitForRequests(1, 5000)),
          async () => void (await sim.waitForClose(() => true, 2000)),
          phase,
        );
      });
      expect(elapsed).toBeLessThan(100);
      // A step after the cancelled one never started.
      if (phase !== 'decode') expect(stack.sims.decode.requests).toHaveLength(0);
    });

    if (phases.includes('media'))
      it('media download', async () => {
        const elapsed = await fastest(() => {
          let arrived!: () => void;
          let closed!: () => void;
          const arrivedP = new Promise<void>((r) => (arrived = r));
          const closedP = new Promise<void>((r) => (closed = r));
          images.on('/img.png', (_req, res) => {
            res.on('close', closed);
            arrived();
          });
          return abortDuring(
            () => arrivedP,
            () => closedP,
            'media',
          );
        });
        expect(elapsed).toBeLessThan(100);
        expect(stack.sims.render.requests).toHaveLength(0);
      });
  });

  it('a failed encode cancels its sibling encode still in flight', async () => {
    // Two images; the first encode request fails, the other hangs until it is cancelled.
    stack.sims.encode.setFaults([{ status: 500, body: UPSTREAM_SECRET, times: 1, delayMs: 100 }, { hang: true }]);
    const b = body('encode');
    const parts = (b['messages'] as Array<{ content: unknown[] }>)[0]!.content;
    parts.push(parts[1]);
    const res = await client.post('/v1/chat/completions', b);
    expectOpenAiError(res, 502);
    await stack.sims.encode.waitForClose((r) => r.status === undefined, 2000);
    expect(stack.sims.prefill.requests).toHaveLength(0);
  });

  it('after every fault the stack serves normally', async () => {
    await sleep(10);
    const res = await client.post('/v1/chat/completions', body('encode'));
    expect(res.status).toBe(200);
  });
});
