/**
 * The built-in steps as the config builder assembles them: `prefill-decode` is a built-in, and
 * the combinations that make no sense with it stop start-up with a message naming the step.
 */
import { ConfigError } from '../../../../src/config/errors';
import type { StepConfig } from '../../../../src/config/config';
import { buildPipeline, type PipelineSettings } from '../../../../src/pipeline/builder';
import { StepRegistry } from '../../../../src/pipeline/registry';
import { registerBuiltinSteps } from '../../../../src/steps';
import { TestDeps } from '../../steps/fake-upstream';

// No step here makes a call: the address only has to be a loopback URL.
const td = new TestDeps('http://127.0.0.1:9');
afterAll(() => td.close());

const registry = registerBuiltinSteps(new StepRegistry());
const sglang: Omit<PipelineSettings, 'steps'> = { kvConnector: 'kv-sglang', ecConnector: undefined, useOpenaiFormat: true };

function build(types: string[], settings: Omit<PipelineSettings, 'steps'> = sglang): string[] {
  const steps: StepConfig[] = types.map((type) => ({ type, params: type === 'render' ? { address: 'http://127.0.0.1:9' } : {} }));
  return buildPipeline({ ...settings, steps }, registry, td.deps).map((s) => s.type);
}

function refusal(types: string[], settings?: Omit<PipelineSettings, 'steps'>): ConfigError {
  try {
    build(types, settings);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error(`${types.join(' -> ')} was accepted`);
}

describe('prefill-decode is a built-in step', () => {
  it.each([
    [['prefill-decode']],
    [['render', 'prefill-decode']],
    [['replace-media-urls', 'render', 'encode', 'prefill-decode']],
    [['render', 'conditional-decode', 'prefill-decode']],
  ])('%j builds with kv-sglang', (types) => {
    expect(build(types)).toEqual(types);
  });

  it('the serial pipeline is unaffected', () => {
    expect(build(['render', 'encode', 'prefill', 'decode'], { ...sglang, kvConnector: 'kv-nixl' })).toEqual([
      'render',
      'encode',
      'prefill',
      'decode',
    ]);
  });
});

describe('prefill-decode: combinations that refuse to start', () => {
  it.each([
    [['render', 'prefill', 'prefill-decode'], 1, 'prefill'],
    [['render', 'prefill-decode', 'decode'], 2, 'decode'],
    [['prefill', 'decode', 'prefill-decode'], 0, 'prefill'],
  ])('%j: together with the serial prefill/decode steps', (types, position, found) => {
    expect(refusal(types).message).toBe(
      `pipeline.steps[${position}]: expected either a "prefill-decode" step or the "prefill" and "decode" steps, not both (prefill-decode sends prefill and decode itself), got "${found}"`,
    );
  });

  it('a step after it', () => {
    expect(refusal(['render', 'prefill-decode', 'encode']).message).toBe(
      'pipeline.steps[2]: expected no step after "prefill-decode" (it sends prefill and hands the request to decode, so it must be the last step), got "encode"',
    );
  });

  it('twice', () => {
    expect(refusal(['render', 'prefill-decode', 'prefill-decode']).message).toBe(
      'pipeline.steps[2]: expected at most one "prefill-decode" step, found a second at position 3',
    );
  });

  it('a serial kv connector (the default included), with upstream’s message', () => {
    for (const kvConnector of [undefined, 'kv-nixl', 'kv-shared-storage']) {
      expect(refusal(['render', 'prefill-decode'], { ...sglang, kvConnector }).message).toMatch(
        /prefill-decode: kv_connector "kv-(shared-storage|nixl)" sends prefill and decode one after the other; use the "prefill" and "decode" steps/,
      );
    }
  });

  it('use_openai_format=false without render, as for the serial steps', () => {
    expect(refusal(['prefill-decode'], { ...sglang, useOpenaiFormat: false }).message).toMatch(
      /^pipeline.use_openai_format: expected true, or a "render" step/,
    );
    expect(build(['render', 'prefill-decode'], { ...sglang, useOpenaiFormat: false })).toEqual(['render', 'prefill-decode']);
  });
});
