/** Steps that read or store big body strings themselves, given a context parsed as the handler parses it. */
import { randomBytes } from 'node:crypto';
import type Redis from 'ioredis';
import { RequestContext, type JsonObject } from '../../../../src/pipeline/context';
import { concatParts, parseJsonBody } from '../../../../src/pipeline/json-body';
import { silentLogger } from '../../../../src/observability/logger';
import { RedisServer } from '../../../support/redis';
import { build, closeAll } from '../../steps/async-broker/harness';
import { mediaStep } from '../../steps/media/helpers';

function contextFor(
  body: JsonObject,
  headers: Record<string, string> = {},
  path = '/v1/chat/completions',
): { ctx: RequestContext; raw: Buffer } {
  const raw = Buffer.from(JSON.stringify(body));
  const parsed = parseJsonBody(raw);
  const ctx = new RequestContext({
    requestId: headers['x-request-id'] ?? 'req-1',
    originalPath: path,
    headers,
    body: parsed.body,
    codec: parsed.codec,
    signal: new AbortController().signal,
    log: silentLogger(),
  });
  return { ctx, raw };
}

describe('replace-media-urls with a big data: URL', () => {
  it('validates it from its header, leaves the URL as sent, and still exposes the payload on the entry', async () => {
    const payload = randomBytes(60_000).toString('base64');
    const uri = `data:Image/PNG;base64,${payload}`;
    const dials: string[] = [];
    const step = mediaStep(
      {},
      {
        dial: async (target) => {
          dials.push(JSON.stringify(target));
          throw new Error('no network in this test');
        },
      },
    );
    const body = {
      model: 'm',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'see' },
            { type: 'image_url', image_url: { url: uri } },
          ],
        },
      ],
    };
    const { ctx, raw } = contextFor(body);

    await step.execute(ctx);

    expect(dials).toEqual([]);
    expect(ctx.multimodalEntries).toHaveLength(1);
    expect(ctx.multimodalEntries[0]!.contentType).toBe('image/png');
    expect(ctx.multimodalEntries[0]!.base64Data).toBe(payload);
    // The body was not rewritten: it still serialises to the client's bytes.
    expect(concatParts(ctx.serialize(ctx.body)).equals(raw)).toBe(true);
  });
});

describe('async-broker enqueue with a big body', () => {
  let server: RedisServer;
  let redis: Redis;

  beforeAll(async () => {
    server = await RedisServer.start();
    redis = server.client();
  });
  afterAll(async () => {
    await closeAll();
    redis.disconnect();
    await server.destroy();
  });

  it('queues the client body with the big string itself, never a placeholder', async () => {
    const { step } = build({
      redis_url: server.url(),
      wakeup_mode: 'poll',
      routes: [{ model: 'test-model', queue: 'big-queue', tier: 'interactive' }],
    });
    const text = randomBytes(50_000).toString('base64');
    const body = { model: 'test-model', messages: [{ role: 'user', content: text }] };
    const { ctx } = contextFor(body, { 'x-ap-mode': 'enqueue', 'x-request-id': 'big-1' });

    const out = await step.execute(ctx);
    expect(out && 'respond' in out && out.respond.status).toBe(202);

    const [member] = await redis.zrange('big-queue', 0, -1);
    expect(member).toContain(`"${text}"`);
    expect(member).not.toContain('epd:');
    expect(JSON.parse(member!).data.payload).toEqual(body);
  });
});
