/**
 * Config parity with upstream's loader (issue #15 item 6): `server.metrics_port`, unknown step
 * params warned about, and the decided differences: keys case-insensitive and quoted scalars read
 * as upstream does (lenient, so an upstream file loads), durations strict (a bare `60` is never
 * 60 ns), environment overrides for every key (not only those the file names).
 */
import { parseConfig } from '../../../src/config/config';
import { ConfigError } from '../../../src/config/errors';
import { unknownStepParams } from '../../../src/pipeline/builder';

const load = (doc: unknown, env: NodeJS.ProcessEnv = {}) => parseConfig(doc, env);

describe('server.metrics_port (PR #2435)', () => {
  it.each([
    [{ metrics_port: 9090 }, {}, { host: undefined, port: 9090 }],
    [{ metrics_port: 0 }, {}, null],
    [{ metrics_port: -1 }, {}, null],
    [{ metrics_addr: '127.0.0.1:0', metrics_port: 9999 }, {}, { host: '127.0.0.1', port: 9999 }],
    [{}, { COORDINATOR_SERVER_METRICS_PORT: '0' }, null],
    [{}, {}, { host: undefined, port: 9464 }],
  ])('server %j env %j -> %j', (server, env, want) => {
    expect(load({ server }, env).server.metricsAddr).toEqual(want);
  });
  it('a port above 65535 stops start-up', () => {
    expect(() => load({ server: { metrics_port: 70000 } })).toThrow('server.metrics_port');
  });
});

describe('keys are case-insensitive, as upstream', () => {
  it('sections, scalar keys and step param keys load in any case, each with a warning', () => {
    const cfg = load({ LOG_LEVEL: 4, Server: { Listen_Addr: '127.0.0.1:7000' }, pipeline: { Steps: [{ Type: 'render', Params: { Address: 'http://r:1' } }] } });
    expect(cfg.logLevel).toBe(4);
    expect(cfg.server.listenAddr).toBe('127.0.0.1:7000');
    expect(cfg.pipeline.steps).toEqual([{ type: 'render', params: { address: 'http://r:1' } }]);
    expect(cfg.warnings).toEqual(expect.arrayContaining([expect.stringContaining('"server.Listen_Addr" read as "server.listen_addr"')]));
  });
  it('two spellings of one key are an error, not a silent pick', () => {
    expect(() => load({ server: { listen_addr: ':1', Listen_Addr: ':2' } })).toThrow(ConfigError);
  });
});

describe('scalars: lenient where upstream reads them, strict where upstream\'s reading is a trap', () => {
  it('quoted numbers and booleans load as upstream reads them', () => {
    const cfg = load({ server: { max_request_body_size: '16' }, pipeline: { use_openai_format: 'false', steps: [{ type: 'render' }] } });
    expect(cfg.server.maxRequestBodyBytes).toBe(16 * 1024 * 1024);
    expect(cfg.pipeline.useOpenaiFormat).toBe(false);
  });
  it.each([
    [{ gateway: { timeout: 60 } }, 'gateway.timeout'],
    [{ gateway: { timeout: '60' } }, 'gateway.timeout'],
    [{ server: { shutdown_timeout: 25 } }, 'server.shutdown_timeout'],
  ])('%j is an error (upstream reads it as nanoseconds)', (doc, key) => {
    expect(() => load(doc)).toThrow(new RegExp(`^${key.replace('.', '\\.')}: expected a duration`));
  });
  it('an environment override applies even to a key the file does not name (upstream ignores it then)', () => {
    expect(load({}, { COORDINATOR_GATEWAY_ADDRESS: 'http://gw:8081' }).gateway.address).toBe('http://gw:8081');
  });
});

describe('unknown step params', () => {
  it('each is named with its step and position; documented and injected ones are not', () => {
    const steps = [
      { type: 'render', params: { address: 'http://r', timeout: '5s' } },
      { type: 'encode', params: { max_paralel: 8, use_openai_format: true } },
      { type: 'prefill', params: { min_prompt_tokens: 64, fallback_to_decode: true, kv_connector: 'kv-nixl' } },
      { type: 'decode', params: { force_stream: true, force_stream_buffer: '1GiB' } },
      { type: 'my-own-step', params: { anything: 1 } },
    ];
    expect(unknownStepParams(steps)).toEqual([
      'unknown param "max_paralel" of step "encode" (pipeline.steps[1].params.max_paralel) ignored',
      'unknown param "force_stream_buffer" of step "decode" (pipeline.steps[3].params.force_stream_buffer) ignored',
    ]);
  });
});
