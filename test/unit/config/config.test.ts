import { join } from 'node:path';
import { loadConfig, parseConfig, envName } from '../../../src/config/config';
import { ConfigError } from '../../../src/config/errors';
import { parseDuration } from '../../../src/config/duration';
import { buildPipeline } from '../../../src/pipeline/builder';
import { StepRegistry } from '../../../src/pipeline/registry';
import type { Step } from '../../../src/pipeline/step';

const fixture = (name: string) => join(__dirname, '../../fixtures', name);

describe('parseConfig', () => {
  test('an empty document gives the documented defaults', () => {
    const c = parseConfig({}, {});
    expect(c.logLevel).toBe(2);
    expect(c.server.listenAddr).toBe('0.0.0.0:50051');
    expect(c.server.maxRequestBodyBytes).toBe(64 * 1024 * 1024);
    expect(c.server.bodyMode).toBe('auto');
    expect(c.server.metadataNamespace).toBe('epd.coordinator');
    expect(c.gateway.timeoutMs).toBe(60_000);
    expect(c.gateway.maxIdleConnsPerHost).toBe(100);
    expect(c.gateway.idleConnTimeoutMs).toBe(90_000);
    expect(c.pipeline.useOpenaiFormat).toBe(true);
    expect(c.pipeline.kvConnector).toBeUndefined();
    expect(c.pipeline.steps).toEqual([]);
  });

  test('server.workers: 1 by default (one process, no cluster primary), up to 64, also from the environment', () => {
    expect(parseConfig({}, {}).server.workers).toBe(1);
    expect(parseConfig({ server: { workers: 64 } }, {}).server.workers).toBe(64);
    expect(parseConfig({}, { COORDINATOR_SERVER_WORKERS: '4' }).server.workers).toBe(4);
  });

  test('server.drain_delay: 0 by default (the preStop sleep does it under Kubernetes), a duration up to 5m', () => {
    expect(parseConfig({}, {}).server.drainDelayMs).toBe(0);
    expect(parseConfig({ server: { drain_delay: '5s' } }, {}).server.drainDelayMs).toBe(5000);
    expect(() => parseConfig({ server: { drain_delay: '6m' } }, {})).toThrow(/server\.drain_delay.*at most 5m/);
  });

  test("the ext_proc listener's HTTP/2 stream-reset budget defaults far above Node's (1000, 33/s)", () => {
    expect(parseConfig({}, {}).server.sessionLimits).toEqual({ streamResetBurst: 100_000, streamResetRate: 10_000 });
    expect(parseConfig({ server: { stream_reset_burst: 5000, stream_reset_rate: 500 } }, {}).server.sessionLimits).toEqual({ streamResetBurst: 5000, streamResetRate: 500 });
  });

  test('max_request_body_size 0 means 64 MiB, as upstream', () => {
    expect(parseConfig({ server: { max_request_body_size: 0 } }, {}).server.maxRequestBodyBytes).toBe(64 * 1024 * 1024);
  });

  test('environment overrides win over the file, with the key type', () => {
    const c = parseConfig(
      { log_level: 2, pipeline: { use_openai_format: true }, gateway: { address: 'http://a:1' } },
      { COORDINATOR_LOG_LEVEL: '5', COORDINATOR_PIPELINE_USE_OPENAI_FORMAT: 'false', COORDINATOR_GATEWAY_ADDRESS: 'http://127.0.0.1:9/', COORDINATOR_SERVER_MAX_REQUEST_BODY_SIZE: '16' },
    );
    expect(c.logLevel).toBe(5);
    expect(c.pipeline.useOpenaiFormat).toBe(false);
    expect(c.gateway.address).toBe('http://127.0.0.1:9');
    expect(c.server.maxRequestBodyBytes).toBe(16 * 1024 * 1024);
    expect(envName('server.max_request_body_size')).toBe('COORDINATOR_SERVER_MAX_REQUEST_BODY_SIZE');
  });

  test.each([
    [{ server: { max_request_body_size: -1 } }, 'server.max_request_body_size: expected an integer >= 0'],
    [{ server: { max_request_body_size: 'big' } }, 'server.max_request_body_size: expected an integer'],
    [{ gateway: { timeout: '60' } }, 'gateway.timeout: expected a duration such as "30s"'],
    [{ server: { body_mode: 'streamed' } }, 'server.body_mode: expected one of auto, full_duplex, buffered'],
    [{ gateway: { address: 'ftp://x' } }, 'gateway.address: expected an http:// or https:// URL'],
    [{ pipeline: { steps: {} } }, 'pipeline.steps: expected a list'],
    [{ pipeline: { steps: [{ params: {} }] } }, 'pipeline.steps[0].type: expected a step type name'],
    [{ pipeline: { steps: [{ type: 'render', params: [] }] } }, 'pipeline.steps[0].params: expected a map'],
    [{ server: 'x' }, 'server: expected a map'],
    [{ server: { stream_reset_burst: 0 } }, 'server.stream_reset_burst: expected an integer >= 1'],
    [{ server: { stream_reset_rate: 2 ** 32 } }, 'server.stream_reset_rate: expected at most 4294967295'],
    [{ server: { workers: 0 } }, 'server.workers: expected an integer >= 1'],
    [{ server: { workers: 65 } }, 'server.workers: expected an integer from 1 to 64'],
    [{ server: { workers: 1.5 } }, 'server.workers: expected an integer'],
    [{ server: { workers: 'two' } }, 'server.workers: expected an integer'],
  ])('a bad value names the key: %j', (doc, message) => {
    expect(() => parseConfig(doc, {})).toThrow(ConfigError);
    expect(() => parseConfig(doc, {})).toThrow(message);
  });

  test('a bad environment value names the variable', () => {
    expect(() => parseConfig({}, { COORDINATOR_LOG_LEVEL: 'loud' })).toThrow('log_level (from COORDINATOR_LOG_LEVEL): expected an integer');
  });

  test('unknown keys are reported as warnings, not silently dropped', () => {
    const c = parseConfig({ server: { listen_adr: ':1' }, extra: 1 }, {});
    expect(c.warnings).toEqual(expect.arrayContaining(['unknown key "server.listen_adr" ignored', 'unknown top-level key "extra" ignored']));
  });

  test('step params keep their YAML types; a step without params gets an empty map', () => {
    const c = parseConfig({ pipeline: { steps: [{ type: 'render', params: { timeout: '30s', max_total_tokens: 5, flag: true, list: ['a'] } }, { type: 'decode' }] } }, {});
    expect(c.pipeline.steps).toEqual([
      { type: 'render', params: { timeout: '30s', max_total_tokens: 5, flag: true, list: ['a'] } },
      { type: 'decode', params: {} },
    ]);
  });
});

describe('loadConfig', () => {
  test('an upstream coordinator.yaml (with its HTTP-server keys) loads unchanged', () => {
    const c = loadConfig(fixture('upstream-coordinator.yaml'), {});
    expect(c.pipeline.steps.map((s) => s.type)).toEqual(['render', 'prefill', 'decode']);
    expect(c.pipeline.kvConnector).toBe('kv-shared-storage');
    expect(c.server.listenAddr).toBe(':8080');
    expect(c.server.shutdownTimeoutMs).toBe(25_000);
    expect(c.warnings.some((w) => w.startsWith('server.read_timeout has no effect'))).toBe(true);
  });

  test('the shipped config/coordinator.yaml loads', () => {
    const c = loadConfig(join(__dirname, '../../../config/coordinator.yaml'), {});
    // envoy/'s health check needs 3 s to see a draining replica.
    expect(c.server.drainDelayMs).toBe(5000);
    expect(c.pipeline.steps.map((s) => s.type)).toEqual(['render', 'prefill', 'decode']);
    expect(c.warnings).toEqual([]);
  });

  test('a missing file and bad YAML are start-up errors that say so', () => {
    expect(() => loadConfig('/nonexistent/coordinator.yaml', {})).toThrow(/--config: expected a readable YAML file/);
  });
});

describe('parseDuration', () => {
  test.each([
    ['10s', 10_000],
    ['1m30s', 90_000],
    ['500ms', 500],
    ['1.5h', 5_400_000],
    ['0', 0],
  ])('%s', (text, ms) => expect(parseDuration(text)).toBe(ms));
  test.each(['30', 'abc', '10 s', '', 's'])('rejects %j', (text) => expect(parseDuration(text)).toBeNull());
});

describe('buildPipeline', () => {
  const deps = {} as never;
  function registryRecording(seen: Record<string, unknown>[]) {
    const r = new StepRegistry();
    for (const t of ['render', 'prefill', 'decode']) {
      r.register(t, (params) => {
        seen.push({ type: t, ...params });
        return { type: t, execute: async () => undefined } as Step;
      });
    }
    return r;
  }

  test('injects the pipeline connectors and format into every step unless the step sets its own', () => {
    const seen: Record<string, unknown>[] = [];
    buildPipeline(
      { kvConnector: 'kv-nixl', ecConnector: 'ec-nixl', useOpenaiFormat: true, steps: [{ type: 'render', params: {} }, { type: 'prefill', params: { kv_connector: 'kv-sglang' } }] },
      registryRecording(seen),
      deps,
    );
    expect(seen).toEqual([
      { type: 'render', kv_connector: 'kv-nixl', ec_connector: 'ec-nixl', use_openai_format: true },
      { type: 'prefill', kv_connector: 'kv-sglang', ec_connector: 'ec-nixl', use_openai_format: true },
    ]);
  });

  test('use_openai_format=false without a render step refuses to start', () => {
    expect(() => buildPipeline({ kvConnector: undefined, ecConnector: undefined, useOpenaiFormat: false, steps: [{ type: 'prefill', params: {} }] }, registryRecording([]), deps)).toThrow(
      /pipeline.use_openai_format: expected true, or a "render" step/,
    );
    expect(() => buildPipeline({ kvConnector: undefined, ecConnector: undefined, useOpenaiFormat: false, steps: [{ type: 'render', params: {} }] }, registryRecording([]), deps)).not.toThrow();
  });

  test('an unknown step type names its position and the known types', () => {
    expect(() => buildPipeline({ kvConnector: undefined, ecConnector: undefined, useOpenaiFormat: true, steps: [{ type: 'render', params: {} }, { type: 'teleport', params: {} }] }, registryRecording([]), deps)).toThrow(
      'pipeline.steps[1].type: expected a known step type (render, prefill, decode), got "teleport"',
    );
  });
});

describe('buildPipeline: async-broker placement', () => {
  const r = new StepRegistry();
  for (const t of ['async-broker', 'render', 'decode']) r.register(t, () => ({ type: t, execute: async () => undefined }) as Step);
  test('async-broker first is accepted; anywhere else refuses to start', () => {
    const base = { kvConnector: undefined, ecConnector: undefined, useOpenaiFormat: true };
    expect(() => buildPipeline({ ...base, steps: [{ type: 'async-broker', params: {} }, { type: 'decode', params: {} }] }, r, {} as never)).not.toThrow();
    expect(() => buildPipeline({ ...base, steps: [{ type: 'render', params: {} }, { type: 'async-broker', params: {} }] }, r, {} as never)).toThrow(
      'pipeline.steps[1]: expected the "async-broker" step to be the first pipeline step, found it at position 2',
    );
  });
});

test('server.streamed_responses defaults on and can be turned off for Envoy 1.34-1.36', () => {
  expect(parseConfig({}, {}).server.streamedResponses).toBe(true);
  expect(parseConfig({ server: { streamed_responses: false } }, {}).server.streamedResponses).toBe(false);
  expect(parseConfig({}, { COORDINATOR_SERVER_STREAMED_RESPONSES: 'false' }).server.streamedResponses).toBe(false);
});
