/**
 * An encode leg is bounded in total, not only until its headers: an encoder that answers at once
 * and then trickles its body must not hold the request until the client leaves.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Socket } from 'node:net';
import { classify, TransportError } from '../../../../src/pipeline/errors';
import { createEncodeStep } from '../../../../src/steps/encode';
import { chatBodyWithImages, entry, makeCtx, TestDeps } from '../fake-upstream';

/** gateway.timeout of this suite; the total bound is twice it. */
const GATEWAY_TIMEOUT_MS = 400;

type Behaviour = (res: ServerResponse) => void;

let server: Server;
let td: TestDeps;
const sockets = new Set<Socket>();
const timers = new Set<NodeJS.Timeout>();
/** Per image hash: what the encoder does, and a promise that settles when its connection closes. */
const behaviours = new Map<string, Behaviour>();
const closed = new Map<string, Promise<void>>();
const closedResolvers = new Map<string, () => void>();

function expectClose(hash: string): void {
  closed.set(hash, new Promise<void>((resolve) => closedResolvers.set(hash, resolve)));
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const json = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const hash: string = json.tokens.features.mm_hashes.image[0];
  res.on('close', () => closedResolvers.get(hash)?.());
  behaviours.get(hash)!(res);
}

/**
 * Past every bound of this suite, a slow encoder does finish: without the total bound the step
 * then succeeds (and the test fails) instead of hanging.
 */
const GIVE_UP_MS = 4000;

function later(ms: number, run: () => void): void {
  const timer = setTimeout(run, ms);
  timers.add(timer);
}

/** Headers and an opening brace at once, then one space every 50 ms for GIVE_UP_MS. */
const trickle: Behaviour = (res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.write('{');
  const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(' ')), 50);
  timers.add(timer);
  res.on('close', () => clearInterval(timer));
  later(GIVE_UP_MS, () => {
    clearInterval(timer);
    if (!res.destroyed) res.end('}');
  });
};

/** Headers at once, a complete answer after `ms`. */
const answerAfter =
  (ms: number): Behaviour =>
  (res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    later(ms, () => !res.destroyed && res.end('{"ec_transfer_params":{"b":{"peer_port":1}}}'));
  };

/** Headers at once, the rest of the body only after GIVE_UP_MS: a cancel (or its own bound) ends it first. */
const holdBody: Behaviour = (res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.write('{');
  later(GIVE_UP_MS, () => !res.destroyed && res.end('}'));
};

beforeAll(async () => {
  server = createServer((req, res) => void handle(req, res));
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  td = new TestDeps(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, GATEWAY_TIMEOUT_MS);
});
afterAll(async () => {
  for (const t of timers) clearTimeout(t);
  for (const s of sockets) s.destroy();
  await td.close();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe('encode: total bound of 2 x gateway.timeout', () => {
  it('an encoder trickling its body past the bound fails the step (502, timed out) and cancels its sibling', async () => {
    // max_parallel 2: image a trickles from the start; image b answers after 400 ms, so image c
    // starts ~400 ms later than a and its own bound cannot fire before a's. c holds its body, so
    // only a's failure cancelling it lets it end before its own bound.
    behaviours.set('a', trickle);
    behaviours.set('b', answerAfter(GATEWAY_TIMEOUT_MS));
    behaviours.set('c', holdBody);
    for (const h of ['a', 'c']) expectClose(h);

    const entries = [entry(0, 'a', 1, 1), entry(1, 'b', 2, 1), entry(2, 'c', 3, 1)];
    const ctx = makeCtx({ body: chatBodyWithImages(3), tokenIds: [1, 9, 9, 9], entries });
    ctx.ecTransferParams = null;
    const step = createEncodeStep({ use_openai_format: true, ec_connector: 'ec-nixl', max_parallel: 2 }, td.deps);

    const err = await step.execute(ctx).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransportError);
    expect(err).toMatchObject({ step: 'encode[0]', timedOut: true, message: 'encode[0]: timed out' });
    expect(classify(err, 'rid').status).toBe(502);
    // Both open legs are hung up on: the trickler by its bound, the sibling by the cancel.
    await closed.get('a');
    await closed.get('c');
    // A failed fan-out publishes nothing, not even the answer that did arrive.
    expect(ctx.ecTransferParams).toBeNull();
  }, 10_000);
});
