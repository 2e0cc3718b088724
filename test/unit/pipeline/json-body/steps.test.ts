/**
 * Big strings through the whole pipeline (parse, every step, the forwarded body): each reaches every
 * side call and the forwarded request byte for byte, and no placeholder ever leaves the service.
 */
import { randomBytes } from 'node:crypto';
import { PipelineHandler } from '../../../../src/pipeline/handler';
import type { Decision } from '../../../../src/pipeline/decision';
import { StepRegistry } from '../../../../src/pipeline/registry';
import type { StepParams } from '../../../../src/pipeline/step';
import { silentLogger } from '../../../../src/observability/logger';
import { registerBuiltinSteps } from '../../../../src/steps';
import { createPrefillDecodeStep } from '../../../../src/steps/prefill-decode';
import { type SeenRequest, useFakeUpstreams } from '../../steps/fake-upstream';

const up = useFakeUpstreams();
const { renderService, gateway } = up;
const registry = registerBuiltinSteps(new StepRegistry());

/** Distinct base64 text well above the 32 KiB raw-string threshold: a swapped splice shows. */
function bigText(bytes: number): string {
  return randomBytes(bytes).toString('base64');
}

function handler(pipelineParams: StepParams, ...steps: Array<[string, StepParams?]>): PipelineHandler {
  const built = steps.map(([type, own], i) => registry.build(type, { ...pipelineParams, ...(own ?? {}) }, up.td.deps, i));
  return new PipelineHandler({ steps: built, maxBodyBytes: 64 * 1024 * 1024, log: silentLogger() });
}

/** Runs one request; `chunks` > 0 hands the body over in chunks of that size, as Envoy streams it. */
async function run(
  h: PipelineHandler,
  path: string,
  body: unknown,
  chunks = 0,
  headers: Record<string, string> = {},
): Promise<{ raw: Buffer; decision: Decision }> {
  const raw = Buffer.from(JSON.stringify(body));
  const exchange = h.begin({ method: 'POST', path, headers: { 'content-type': 'application/json', ...headers } })!;
  if (chunks <= 0) return { raw, decision: await exchange.complete(raw) };
  const parts: Buffer[] = [];
  for (let i = 0; i < raw.length; i += chunks) parts.push(raw.subarray(i, i + chunks));
  return { raw, decision: await exchange.completeParts!(parts, raw.length) };
}

function forwarded(d: Decision): Buffer {
  if (d.kind !== 'forward') throw new Error(`expected a forward decision, got ${d.kind} ${JSON.stringify(d.metadata)}`);
  if (d.body === null) throw new Error('expected a new body');
  return Buffer.isBuffer(d.body) ? d.body : Buffer.concat(d.body as Buffer[]);
}

/** No placeholder, whole or in part, in anything that left the service. */
function expectNoPlaceholder(bodies: Array<string | Buffer>): void {
  for (const b of bodies) {
    const text = b.toString();
    expect(text).not.toContain('\\u0000epd:');
    expect(text).not.toContain('\u0000');
    expect(text).not.toContain('epd:');
  }
}

/** Whether the raw bytes carry the string exactly as a JSON string token. */
function carries(raw: string | Buffer, s: string): boolean {
  return raw.toString().includes(`"${s}"`);
}

function allSideCalls(): SeenRequest[] {
  return [...renderService.seen, ...gateway.seen];
}

describe.each([
  ['whole', 0],
  ['in 16 KiB chunks', 16 * 1024],
])('big strings through the pipeline (body %s)', (_how, chunks) => {
  it('tokens-in generate: kwargs_data reaches prefill and the forwarded decode request byte for byte, never re-serialised', async () => {
    const kw = bigText(60_000);
    gateway.respond = () => ({ body: { kv_transfer_params: { remote_block_ids: [1, 2] } } });
    const h = handler({ use_openai_format: false }, ['render'], ['prefill'], ['decode']);
    const body = {
      model: 'm',
      token_ids: [1, 32000, 32000, 5],
      sampling_params: { max_tokens: 8 },
      features: { mm_hashes: { image: ['h0'] }, mm_placeholders: { image: [{ offset: 1, length: 2 }] }, kwargs_data: { image: [kw] } },
    };
    const { raw, decision } = await run(h, '/inference/v1/generate', body, chunks);

    const [prefill] = gateway.seen;
    expect(prefill!.path).toBe('/inference/v1/generate');
    expect(prefill!.json.features.kwargs_data.image).toEqual([kw]);
    expect(carries(prefill!.raw, kw)).toBe(true);
    expect(prefill!.headers['content-length']).toBe(String(Buffer.byteLength(prefill!.raw)));
    expect(prefill!.headers['transfer-encoding']).toBeUndefined();

    const out = forwarded(decision);
    const json = JSON.parse(out.toString());
    expect(json.features).toEqual(body.features);
    expect(json).toHaveProperty('sampling_params.extra_args.kv_transfer_params');
    // The big string in the forwarded body is the client's own bytes (its chunks), not a copy.
    if (decision.kind !== 'forward' || Buffer.isBuffer(decision.body)) throw new Error('expected the forwarded body in parts');
    const shared = (decision.body as Buffer[]).filter((p) => p.buffer === raw.buffer);
    expect(shared.reduce((n, p) => n + p.length, 0)).toBeGreaterThanOrEqual(kw.length);
    expectNoPlaceholder([out, ...allSideCalls().map((r) => r.raw)]);
  });

  it('chat with a big data: URL: replace-media-urls, render, encode, prefill and the forwarded request all carry it', async () => {
    const uri = `data:image/png;base64,${bigText(50_000)}`;
    const text = bigText(40_000);
    renderService.respond = () => ({
      body: {
        token_ids: [1, 9, 9, 2],
        features: {
          mm_hashes: { image: ['hash-a'] },
          mm_placeholders: { image: [{ offset: 1, length: 2 }] },
          kwargs_data: { image: ['KW'] },
        },
      },
    });
    gateway.respond = (req) =>
      req.headers['epp-profile'] === 'encode'
        ? { body: { ec_transfer_params: { 'hash-a': { peer: 'enc-1' } } } }
        : { body: { kv_transfer_params: { block: 'b1' } } };
    const h = handler(
      { use_openai_format: true, ec_connector: 'ec-nixl', kv_connector: 'kv-nixl' },
      ['replace-media-urls'],
      ['render', { address: renderService.url }],
      ['encode'],
      ['prefill'],
      ['decode'],
    );
    const body = {
      model: 'm',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text },
            { type: 'image_url', image_url: { url: uri } },
          ],
        },
      ],
      max_tokens: 5,
    };
    const { decision } = await run(h, '/v1/chat/completions', body, chunks);

    const [render] = renderService.seen;
    expect(render!.json).toEqual(body);
    expect(carries(render!.raw, uri) && carries(render!.raw, text)).toBe(true);
    const encode = gateway.seen.find((r) => r.headers['epp-profile'] === 'encode')!;
    expect(encode.json.messages[0].content[0].image_url.url).toBe(uri);
    expect(carries(encode.raw, text)).toBe(false); // only the image goes to encode
    const prefill = gateway.seen.find((r) => r.headers['epp-profile'] === 'prefill')!;
    expect(prefill.json.messages).toEqual(body.messages);
    expect(prefill.json.ec_transfer_params).toEqual({ 'hash-a': { peer: 'enc-1' } });

    const json = JSON.parse(forwarded(decision).toString());
    expect(json.messages[0].content[0].text).toBe(text);
    expect(json.messages[0].content[1]).toEqual({ type: 'image_url', image_url: { url: uri }, uuid: 'hash-a' });
    expect(decision.metadata['mm_entries']).toBe(1);
    expectNoPlaceholder([forwarded(decision), ...allSideCalls().map((r) => r.raw)]);
  });

  it('completions with a big prompt: render gets the prompt, prefill and decode get the token ids', async () => {
    const prompt = bigText(45_000);
    renderService.respond = () => ({ body: [{ token_ids: [7, 8, 9] }] });
    gateway.respond = () => ({ body: { kv_transfer_params: { block: 'b1' } } });
    const h = handler({ use_openai_format: true }, ['render', { address: renderService.url }], ['prefill'], ['decode']);
    const { decision } = await run(h, '/v1/completions', { model: 'm', prompt, max_tokens: 3 }, chunks);

    expect(renderService.seen[0]!.json.prompt).toBe(prompt);
    expect(carries(renderService.seen[0]!.raw, prompt)).toBe(true);
    expect(gateway.seen[0]!.json.prompt).toEqual([7, 8, 9]);
    expect(JSON.parse(forwarded(decision).toString()).prompt).toEqual([7, 8, 9]);
    expectNoPlaceholder([forwarded(decision), ...allSideCalls().map((r) => r.raw)]);
  });

  it('conditional-decode sends the big body on a miss, and the cascade still forwards it', async () => {
    const text = bigText(40_000);
    gateway.respond = (req) =>
      req.headers['prefer'] === 'if-available' ? { status: 412, body: '' } : { body: { kv_transfer_params: { block: 'b1' } } };
    const h = handler({ use_openai_format: true }, ['conditional-decode'], ['prefill'], ['decode']);
    const body = { model: 'm', messages: [{ role: 'user', content: text }] };
    const { decision } = await run(h, '/v1/chat/completions', body, chunks);

    const [probe, prefill] = gateway.seen;
    expect(probe!.headers['prefer']).toBe('if-available');
    expect(probe!.json.messages).toEqual(body.messages);
    expect(carries(probe!.raw, text)).toBe(true);
    expect(prefill!.json.messages).toEqual(body.messages);
    expect(JSON.parse(forwarded(decision).toString()).messages).toEqual(body.messages);
    expectNoPlaceholder([forwarded(decision), ...allSideCalls().map((r) => r.raw)]);
  });

  it('prefill-decode carries the big body on the reserve, the pinned prefill and the forwarded decode', async () => {
    const text = bigText(40_000);
    gateway.respond = (req) =>
      req.headers['prefer'] === 'reserve-endpoint'
        ? { status: 204, headers: { 'x-llm-d-reserved-host-port': '10.0.3.7:8000' }, body: '' }
        : { status: 200, body: { choices: [] } };
    const step = createPrefillDecodeStep({ use_openai_format: true, kv_connector: 'kv-sglang' }, up.td.deps);
    const h = new PipelineHandler({ steps: [step], maxBodyBytes: 64 * 1024 * 1024, log: silentLogger() });
    const body = { model: 'm', messages: [{ role: 'user', content: text }], max_tokens: 4 };
    const { decision } = await run(h, '/v1/chat/completions', body, chunks);
    for (let i = 0; i < 400 && gateway.seen.length < 2; i++) await new Promise((r) => setTimeout(r, 5));

    const [reserve, prefill] = gateway.seen;
    expect(reserve!.json.messages).toEqual(body.messages);
    expect(prefill!.json.messages).toEqual(body.messages);
    expect(carries(prefill!.raw, text)).toBe(true);
    const json = JSON.parse(forwarded(decision).toString());
    expect(json.messages).toEqual(body.messages);
    expect(json.bootstrap_room).toBe(prefill!.json.bootstrap_room);
    expectNoPlaceholder([forwarded(decision), ...allSideCalls().map((r) => r.raw)]);
  });
});

describe('big strings that steps read', () => {
  it('a big data: URL with a type that is not an image is still refused with a 400', async () => {
    const h = handler({}, ['replace-media-urls']);
    const uri = `data:text/html;base64,${bigText(40_000)}`;
    const { decision } = await run(h, '/v1/chat/completions', {
      model: 'm',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: uri } }] }],
    });
    expect(decision.kind).toBe('respond');
    if (decision.kind !== 'respond') return;
    expect(decision.status).toBe(400);
    expect((decision.body as Buffer).toString()).toContain('data URI content type \\"text/html\\" not allowed at message 0 part 0');
    expectNoPlaceholder([decision.body as Buffer]);
  });

  it('a big data: URL without a comma is refused with a 400, never downloaded', async () => {
    const h = handler({}, ['replace-media-urls']);
    const uri = `data:image/png;base64${bigText(40_000).replace(/,/g, '')}`;
    const { decision } = await run(h, '/v1/chat/completions', {
      model: 'm',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: uri } }] }],
    });
    expect(decision.kind === 'respond' && decision.status).toBe(400);
    expect(decision.kind === 'respond' && (decision.body as Buffer).toString()).toContain('missing comma in data URI');
  });

  it('a big model name is read as itself', async () => {
    const model = `m-${'x'.repeat(40_000)}`;
    gateway.respond = () => ({ body: { kv_transfer_params: {} } });
    const h = handler({ use_openai_format: false }, ['render'], ['prefill'], ['decode']);
    const { decision } = await run(h, '/inference/v1/generate', { model, token_ids: [1, 2] });
    expect(gateway.seen[0]!.json.model).toBe(model);
    expect(JSON.parse(forwarded(decision).toString()).model).toBe(model);
    expectNoPlaceholder([forwarded(decision), gateway.seen[0]!.raw]);
  });
});
