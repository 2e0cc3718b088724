/**
 * Issue #19 item 6: the service enforces the path allow-list itself. Behind a real Envoy whose one
 * route sends every path to the filter and decode (launch/envoy-bootstrap.ts `catchAll`: no path
 * policy at the edge, as an Envoy we did not render may be), every known worker control path and
 * every dressed-up spelling gets our 404, and no simulator records a request; the allowed paths
 * still work. With Envoy's path normalisation (the service sees what the route would have seen,
 * and answers as envoy/'s allow-list does) and without it (the service sees the path as the client
 * wrote it; in both body modes). Paths are sent raw (undici's Client takes the request target as
 * given).
 */
import { Client } from 'undici';
import { KNOWN_CONTROL_PATHS, REFUSED_PATH_BODY } from '../../src/pipeline/path-policy';
import { startStack, ROLES, type Stack } from '../support/stack';
import { PATH_VARIANTS, type PathAnswer } from '../support/trust-cases';

const chat = JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'path' }], max_tokens: 2 });

/** Control paths reached through a served prefix or by an encoding, which a worker's router may resolve. */
const DRESSED_UP: readonly string[] = [
  '/v1/models/../../metrics',
  '/v1/models/..%2F..%2Fmetrics',
  '/v1/models/%2e%2e/%2e%2e/metrics',
  '/v1/models/..;/..;/metrics',
  '/v1/requests/../../sleep',
  '/v1/requests/x/../../../collective_rpc',
  '/v1/chat/completions/../render',
  '/v1/chat/completions%2Frender',
  '/v1/responses/render?x=1',
  '/%6detrics',
  '/metrics?/v1/chat/completions',
];

/** Envoy's HTTP connection manager without path normalisation (Envoy's own defaults). */
const withoutNormalisation = (yaml: string): string =>
  yaml
    .replaceAll('normalize_path: true', 'normalize_path: false')
    .replaceAll('merge_slashes: true', 'merge_slashes: false')
    .replaceAll('path_with_escaped_slashes_action: UNESCAPE_AND_REDIRECT', 'path_with_escaped_slashes_action: KEEP_UNCHANGED');

/** Without normalisation only the path itself runs the pipeline; every other spelling is our 404. */
function rawAnswer(path: string): PathAnswer {
  if (path === '/v1/chat/completions' || path === '/v1/chat/completions?stream=false') return 'pipeline';
  return 404;
}

describe.each([
  ['full_duplex', 'normalised', true],
  ['full_duplex', 'not normalised', false],
  ['buffered', 'not normalised', false],
] as const)(
  'the service refuses what its allow-list does not name, behind a catch-all Envoy route (%s, %s paths)',
  (bodyMode, _name, normalised) => {
    let stack: Stack;
    let client: Client;
    beforeAll(async () => {
      stack = await startStack({ bodyMode, envoyCatchAll: true, ...(normalised ? {} : { editEnvoyConfig: withoutNormalisation }) });
      client = new Client(stack.publicUrl);
    });
    afterAll(async () => {
      await client?.close();
      await stack?.close();
    });
    beforeEach(() => stack.reset());

    const send = async (method: 'GET' | 'POST', path: string) => {
      const res = await client.request({
        method,
        path,
        headers: { 'content-type': 'application/json' },
        body: method === 'POST' ? chat : undefined,
      });
      const text = await res.body.text();
      return { status: res.statusCode, headers: res.headers, text };
    };
    const workerRequests = () => ROLES.flatMap((r) => stack.sims[r].requests.map((q) => `${r} ${q.method} ${q.url}`));
    const expectRefused = (res: Awaited<ReturnType<typeof send>>) => {
      expect({ status: res.status, type: res.headers['content-type'], body: res.text }).toEqual({
        status: 404,
        type: 'application/json',
        body: REFUSED_PATH_BODY,
      });
      expect(workerRequests()).toEqual([]);
    };

    test.each(KNOWN_CONTROL_PATHS.flatMap((p) => [['GET', p] as const, ['POST', p] as const]))(
      "%s %s: the service's 404, in the OpenAI error shape; no worker sees it",
      async (method, path) => {
        expectRefused(await send(method, path));
      },
    );

    test.each(DRESSED_UP)('GET %s: refused, no worker sees it', async (path) => {
      const res = await send('GET', path);
      // A redirect is not a forward: with normalisation an escaped slash gets Envoy's 307.
      if (normalised && /%2F/i.test(path)) {
        expect(res.status).toBe(307);
        expect(workerRequests()).toEqual([]);
        return;
      }
      expectRefused(res);
    });

    test.each(PATH_VARIANTS)('POST %s', async (path, edgeAnswer) => {
      const answer = normalised ? edgeAnswer : rawAnswer(path);
      const res = await send('POST', path);
      if (answer === 'pipeline') {
        expect(res.status).toBe(200);
        expect(stack.sims.prefill.requests).toHaveLength(1);
        expect(stack.sims.decode.requests.map((r) => r.path)).toEqual(['/v1/chat/completions']);
        return;
      }
      if (answer === 404) return expectRefused(res);
      expect(res.status).toBe(answer);
      expect(workerRequests()).toEqual([]);
    });

    test('a refused path is in the access log as our answer: error step "path", no upstream', async () => {
      await send('GET', '/metrics');
      const line = await stack.accessLog.waitFor((e) => e.listener === 'public' && e.path === '/metrics');
      expect(line).toMatchObject({ response_code: 404, path_taken: 'error', error_step: 'path', upstream_host: null });
    });

    test('the allowed paths still work: the pipeline, and the other OpenAI APIs to decode', async () => {
      expect((await send('POST', '/v1/chat/completions')).status).toBe(200);
      expect(stack.sims.prefill.requests).toHaveLength(1);
      stack.reset();
      const models = await send('GET', '/v1/models');
      expect(models.status).toBe(200);
      expect(stack.sims.decode.requests.map((r) => [r.method, r.path, r.headers['epp-profile']])).toEqual([
        ['GET', '/v1/models', 'decode'],
      ]);
    });
  },
);
