import { parseConfig } from '../../../src/config/config';
import { ConfigError } from '../../../src/config/errors';
import type { RespondDecision } from '../../../src/pipeline/decision';
import { PipelineHandler } from '../../../src/pipeline/handler';
import {
  allowedPathEntries,
  DECODE_PATHS,
  DECODE_PREFIXES,
  DEFAULT_PATH_POLICY,
  KNOWN_CONTROL_PATHS,
  pathAllowed,
  pathPolicy,
  PathPolicyError,
  PIPELINE_PATHS,
  REFUSED_PATH_BODY,
  SERVICE_PREFIXES,
} from '../../../src/pipeline/path-policy';
import type { PipelineObserver } from '../../../src/pipeline/observer';
import type { Step } from '../../../src/pipeline/step';
import { silentLogger } from '../../../src/observability/logger';
import { startService } from '../../../src/service';
import { PATH_VARIANTS } from '../../support/trust-cases';

const allowed = (path: string) => pathAllowed(DEFAULT_PATH_POLICY, path);

describe('pathAllowed (the default list)', () => {
  test.each([...PIPELINE_PATHS, ...DECODE_PATHS])('%s is served, also with a query string', (path) => {
    expect(allowed(path)).toBe(true);
    expect(allowed(`${path}?a=1&b=/metrics`)).toBe(true);
  });

  test.each(['/v1/requests/abc-123', '/v1/models/meta-llama/Llama-3.1-8B-Instruct', '/v1/models/lora:v2@x'])(
    'a prefix with a plain remainder is served: %s',
    (path) => expect(allowed(path)).toBe(true),
  );

  test.each(KNOWN_CONTROL_PATHS)('control path %s is refused', (path) => {
    expect(allowed(path)).toBe(false);
    expect(allowed(`${path}?x=1`)).toBe(false);
  });

  // What an Envoy without normalisation passes on as the client wrote it: never a control path,
  // and no spelling of a served path that is not the path itself.
  test.each([
    '//v1/chat/completions',
    '/v1//chat/completions',
    '/v1/./chat/completions',
    '/v1/x/../chat/completions',
    '/v1/chat/completions/',
    '/v1/chat/completions/.',
    '/v1/chat/completions;x',
    '/v1/chat/completions%00',
    '/v1/chat%2Fcompletions',
    '/v1/chat/completion%73',
    '/V1/chat/completions',
    '/v1/chat/completions#frag',
    ' /v1/chat/completions',
    '/v1/requests/',
    '/v1/requests',
    '/v1/requests/../../metrics',
    '/v1/requests/%2e%2e/%2e%2e/metrics',
    '/v1/requests/a/../../../sleep',
    '/v1/requests/..;/sleep',
    '/v1/requests/a//b',
    '/v1/requests/./x',
    '/v1/requests/x%2F..%2F..%2Fmetrics',
    '/v1/models/',
    '/v1/models/..',
    '/v1/models/a/..',
    '/v1/modelsx',
    '/v1/responses/render',
    '/v1/responses/resp_1',
    '*',
    '',
    'v1/chat/completions',
    'http://host/v1/chat/completions',
  ])('%j is refused', (path) => expect(allowed(path)).toBe(false));

  test('never looser than the Envoy route: every path variant Envoy refuses, the service refuses', () => {
    for (const [path, answer] of PATH_VARIANTS) if (answer !== 'pipeline') expect([path, allowed(path)]).toEqual([path, false]);
  });
});

describe('pathPolicy (server.allowed_paths)', () => {
  test('the default list, as server.allowed_paths writes it, is the default policy', () => {
    const entries = allowedPathEntries();
    expect(entries).toEqual([...PIPELINE_PATHS, ...DECODE_PATHS, ...[...SERVICE_PREFIXES, ...DECODE_PREFIXES].map((p) => `${p}*`)]);
    expect(pathPolicy(entries)).toEqual(DEFAULT_PATH_POLICY);
  });

  test('the list replaces the default one: a path can be opened and closed', () => {
    const p = pathPolicy(['/v1/chat/completions', '/v1/my-api', '/v1/files/*']);
    expect(pathAllowed(p, '/v1/my-api')).toBe(true);
    expect(pathAllowed(p, '/v1/files/file-1')).toBe(true);
    expect(pathAllowed(p, '/v1/files')).toBe(false);
    expect(pathAllowed(p, '/v1/files/../metrics')).toBe(false);
    expect(pathAllowed(p, '/v1/chat/completions')).toBe(true);
    expect(pathAllowed(p, '/v1/completions')).toBe(false);
    expect(pathAllowed(p, '/v1/models')).toBe(false);
  });

  test.each([
    [[], 'at least one path'],
    [['/*'], 'plain segments'],
    [['/'], 'plain segments'],
    [['v1/x'], 'plain segments'],
    [['/v1/x/'], 'plain segments'],
    [['/v1//x'], 'plain segments'],
    [['/v1/../metrics'], 'plain segments'],
    [['/v1/./x'], 'plain segments'],
    [['/v1/x?y=1'], 'plain segments'],
    [['/v1/x%2F'], 'plain segments'],
    [['/v1/x*'], 'plain segments'],
    [['/v1/*/x'], 'plain segments'],
    [['/v1/x;y'], 'plain segments'],
  ])('%j is refused: %s', (entries, says) => {
    expect(() => pathPolicy(entries)).toThrow(PathPolicyError);
    expect(() => pathPolicy(entries)).toThrow(says);
  });
});

describe('server.allowed_paths', () => {
  test('unset is the built-in list; a YAML list or a comma-separated environment value is read as written', () => {
    expect(parseConfig({}, {}).server.allowedPaths).toBeUndefined();
    expect(parseConfig({ server: { allowed_paths: ['/v1/chat/completions', '/v1/files/*'] } }, {}).server.allowedPaths).toEqual([
      '/v1/chat/completions',
      '/v1/files/*',
    ]);
    const env = { COORDINATOR_SERVER_ALLOWED_PATHS: '/v1/completions, /v1/my-api' };
    expect(parseConfig({}, env).server.allowedPaths).toEqual(['/v1/completions', '/v1/my-api']);
    expect(() => parseConfig({ server: { allowed_paths: [1] } }, {})).toThrow(ConfigError);
  });

  test.each([[[]], [['/*']], [['/v1/../metrics']]])('start-up refuses %j under the config key', async (entries) => {
    const config = parseConfig({ server: { listen_addr: '127.0.0.1:0', metrics_addr: 'off', allowed_paths: entries } }, {});
    await expect(startService(config, { log: silentLogger() })).rejects.toThrow(/^server\.allowed_paths: expected /);
  });
});

describe('the handler refuses a path the policy does not allow', () => {
  let stepRuns = 0;
  const steps: Step[] = [{ type: 'decode', execute: async () => void stepRuns++ }];
  const decided: string[] = [];
  const observer: PipelineObserver = {
    requestStarted: () => {
      throw new Error('no pipeline request may start');
    },
    decided: (path) => void decided.push(path),
  };
  // A route that would answer any path: the policy comes first.
  const route = { method: 'GET', match: () => ({}), handle: async () => ({ status: 200, headers: {}, body: Buffer.from('route') }) };
  const handler = (pathPolicy = DEFAULT_PATH_POLICY) =>
    new PipelineHandler({ steps, routes: [route], maxBodyBytes: 1024, log: silentLogger(), observer, pathPolicy });
  beforeEach(() => {
    stepRuns = 0;
    decided.length = 0;
  });

  test.each([
    ['GET', '/metrics'],
    ['POST', '/v1/chat/completions/render'],
    ['POST', '//v1/chat/completions'],
    ['GET', '/v1/models/../../metrics'],
  ])('%s %s: our 404 from the head, before headers and steps, counted as an error', (method, path) => {
    // A header value the header policy would refuse with a 400: the path is judged first.
    const ex = handler().begin({ method, path, headers: { 'x-request-id': 'r-1', 'x-llm-d-inference-fairness-id': '\u00ff' } })!;
    const refused = ex.refused as RespondDecision;
    expect(refused.status).toBe(404);
    expect(refused.headers['content-type']).toBe('application/json');
    expect((refused.body as Buffer).toString()).toBe(REFUSED_PATH_BODY);
    expect(refused.metadata).toMatchObject({ request_id: 'r-1', path_taken: 'error', error_step: 'path', status: 404 });
    expect(decided).toEqual(['error']);
    expect(stepRuns).toBe(0);
  });

  test('the configured list decides: an opened path passes to decode, a closed one is refused', async () => {
    const h = handler(pathPolicy(['/v1/chat/completions', '/v1/my-api']));
    const opened = await h.begin({ method: 'POST', path: '/v1/my-api', headers: {} })!.complete(Buffer.from('{}'));
    expect(opened).toMatchObject({ kind: 'forward', setHeaders: { 'epp-profile': 'decode' } });
    expect(h.begin({ method: 'POST', path: '/v1/embeddings', headers: {} })!.refused?.status).toBe(404);
    expect(decided).toEqual(['passthrough', 'error']);
  });
});
