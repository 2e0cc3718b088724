/**
 * Upstream's e2e log assertions against our log (issue #15 item 4): the llm-d coordinator e2e
 * suite (`test/coordinator/e2e/coordinator/coordinator_test.go`, `verifyCoordinatorSteps` and
 * `verifyTokenLimits`) reads the coordinator's JSON log at log_level 5 and asks, line by line,
 * whether one line holds all of some substrings. The same questions are asked here, with the same
 * substrings, of our service log after one request through the real Envoy. Plus what the
 * redaction must hide, and that nothing of it is written at the default level.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TestClient } from '../../launch/client';
import { stackConfigDoc, startStack, type Stack, type StackOptions } from '../support/stack';
import { PNG_BYTES } from '../unit/steps/media/image-server';

const MODEL = 'sim-model';
const PNG_URI = `data:image/png;base64,${PNG_BYTES.toString('base64')}`;
const MIN_TOKENS = 2;
const MAX_TOKENS = 20;
const SECRET = 'Bearer very-secret-token';

/** Upstream's logHasLine: does any single line contain every substring? */
function logHasLine(logs: string, ...substrs: string[]): boolean {
  return logs.split('\n').some((line) => substrs.every((s) => line.includes(s)));
}

const steps = ({ render }: { render: string }) => [
  { type: 'replace-media-urls' },
  { type: 'render', params: { address: render, timeout: '30s' } },
  { type: 'encode', params: { max_parallel: 8 } },
  { type: 'prefill' },
  { type: 'decode' },
];

function nixlStack(logLevel: number): StackOptions {
  return {
    logLevel,
    configDoc: (urls) => {
      const doc = stackConfigDoc({ logLevel, kvConnector: 'kv-nixl', steps }, urls);
      (doc['pipeline'] as Record<string, unknown>)['ec_connector'] = 'ec-nixl';
      return doc;
    },
  };
}

async function oneRequest(stack: Stack): Promise<string> {
  const client = new TestClient(stack.publicUrl);
  try {
    const res = await client.post(
      '/v1/chat/completions',
      {
        model: MODEL,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'what is in this picture' },
              { type: 'image_url', image_url: { url: PNG_URI } },
            ],
          },
        ],
        min_tokens: MIN_TOKENS,
        max_tokens: MAX_TOKENS,
      },
      { headers: { authorization: SECRET } },
    );
    expect(res.status).toBe(200);
  } finally {
    await client.close();
  }
  return readFileSync(join(stack.dir, 'service.log'), 'utf8');
}

describe('upstream e2e log assertions at log level 5', () => {
  let stack: Stack;
  let logs: string;
  beforeAll(async () => {
    stack = await startStack(nixlStack(5));
    logs = await oneRequest(stack);
  });
  afterAll(async () => {
    await stack?.close();
  });

  it('verifyCoordinatorSteps: a "step complete" line for every step', () => {
    for (const step of ['replace-media-urls', 'render', 'encode', 'prefill', 'decode']) {
      expect([step, logHasLine(logs, '"msg":"step complete"', `"step":"${step}"`)]).toEqual([step, true]);
    }
  });

  it('verifyCoordinatorSteps, kv-nixl: kv_transfer_params on the prefill request, its response, and the decode params', () => {
    expect(logHasLine(logs, '"msg":"request body"', '"epp-profile":"prefill"', '"kv_transfer_params"')).toBe(true);
    expect(logHasLine(logs, '"msg":"response body"', '"do_remote_prefill":true')).toBe(true);
    expect(logHasLine(logs, '"msg":"preparing decode kv params"', '"do_remote_prefill":true')).toBe(true);
  });

  it('verifyCoordinatorSteps, one image with ec-nixl: sub-requests, merged encode response, ec params on prefill', () => {
    expect(logHasLine(logs, '"msg":"all sub-requests complete"', '"count":1')).toBe(true);
    expect(logHasLine(logs, '"msg":"merged encode response"', '"total":1')).toBe(true);
    expect(logHasLine(logs, '"msg":"request body"', '"epp-profile":"prefill"', '"ec_transfer_params"')).toBe(true);
  });

  it('verifyTokenLimits: decode keeps the client limits; prefill and encode cap to one token without min_tokens', () => {
    expect(
      logHasLine(logs, '"msg":"request body"', '"epp-profile":"decode"', `"min_tokens":${MIN_TOKENS}`, `"max_tokens":${MAX_TOKENS}`),
    ).toBe(true);
    for (const phase of ['prefill', 'encode']) {
      const phaseField = `"epp-profile":"${phase}"`;
      expect([phase, logHasLine(logs, '"msg":"request body"', phaseField, '"max_tokens":1')]).toEqual([phase, true]);
      expect([phase, logHasLine(logs, '"msg":"request body"', phaseField, '"min_tokens"')]).toEqual([phase, false]);
    }
  });

  it('pipeline step timings at info, with parse and every step', () => {
    const line = logs.split('\n').find((l) => l.includes('"msg":"pipeline step timings"'));
    expect(line).toBeDefined();
    const fields = JSON.parse(line!) as Record<string, unknown>;
    expect(fields['level']).toBe(30);
    for (const k of ['parse', 'render', 'encode', 'prefill', 'decode']) expect(String(fields[k])).toMatch(/^\d+(\.\d+)?(ns|µs|ms|s)$/);
  });

  it('redaction: no credential and no image bytes in any leg line', () => {
    expect(logs).not.toContain('very-secret-token');
    expect(logs).not.toContain(PNG_BYTES.toString('base64'));
    expect(logHasLine(logs, '"msg":"request body"', '"authorization":"[REDACTED]"')).toBe(true);
    expect(logHasLine(logs, '"msg":"request body"', '"epp-profile":"decode"', '"url":"[base64]"')).toBe(true);
  });
});

describe('leg logging off at the default level', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack(nixlStack(2));
  });
  afterAll(async () => {
    await stack?.close();
  });

  it('log level 2 writes the timings line but no leg headers or bodies', async () => {
    const logs = await oneRequest(stack);
    expect(logHasLine(logs, '"msg":"pipeline step timings"')).toBe(true);
    expect(logHasLine(logs, '"msg":"request body"')).toBe(false);
    expect(logHasLine(logs, '"msg":"response body"')).toBe(false);
    expect(logHasLine(logs, '"msg":"step complete"')).toBe(false);
  });
});
