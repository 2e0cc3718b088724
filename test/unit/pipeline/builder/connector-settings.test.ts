/**
 * `pipeline.dp_size` and `pipeline.kv_connector_params` (reference §4.4, §12.10): set once for the
 * pipeline, seen on the prefill leg's wire, and overridden by a step's own settings.
 */
import { parseConfig } from '../../../../src/config/config';
import { ConfigError } from '../../../../src/config/errors';
import type { StepConfig } from '../../../../src/config/config';
import { buildPipeline, type PipelineSettings } from '../../../../src/pipeline/builder';
import { StepRegistry } from '../../../../src/pipeline/registry';
import type { Step } from '../../../../src/pipeline/step';
import { registerBuiltinSteps } from '../../../../src/steps';
import { makeCtx, useFakeUpstreams } from '../../steps/fake-upstream';

const up = useFakeUpstreams();
const { gateway } = up;

const registry = registerBuiltinSteps(new StepRegistry());

/** The prefill step the pipeline builds from a config document's `pipeline` section. */
function prefillFrom(pipeline: Record<string, unknown>): Step {
  const cfg = parseConfig(
    { gateway: { address: gateway.url }, pipeline: { steps: [{ type: 'prefill' }, { type: 'decode' }], ...pipeline } },
    {},
  );
  return buildPipeline(cfg.pipeline, registry, up.td.deps)[0]!;
}

async function prefillLeg(pipeline: Record<string, unknown>): Promise<{ headers: Record<string, string>; kv: Record<string, unknown> }> {
  await prefillFrom(pipeline).execute(makeCtx({ requestId: 'req-dp-1' }));
  const seen = gateway.seen[0]!;
  return { headers: seen.headers, kv: seen.json.kv_transfer_params };
}

describe('pipeline.dp_size', () => {
  it('kv-nixl with dp_size 2 puts a rank on the prefill leg', async () => {
    const { headers } = await prefillLeg({ kv_connector: 'kv-nixl', dp_size: 2 });
    expect(headers['x-data-parallel-rank']).toMatch(/^[01]$/);
  });

  it('the default (1) sends no rank', async () => {
    const { headers } = await prefillLeg({ kv_connector: 'kv-nixl' });
    expect(headers['x-data-parallel-rank']).toBeUndefined();
  });

  it("a step's own dp_size wins", async () => {
    const { headers } = await prefillLeg({ kv_connector: 'kv-nixl', dp_size: 4, steps: [{ type: 'prefill', params: { dp_size: 1 } }] });
    expect(headers['x-data-parallel-rank']).toBeUndefined();
  });

  it('comes from COORDINATOR_PIPELINE_DP_SIZE too, and a negative value stops start-up', () => {
    const cfg = parseConfig({ pipeline: { steps: [] } }, { COORDINATOR_PIPELINE_DP_SIZE: '8' });
    expect(cfg.pipeline.dpSize).toBe(8);
    expect(() => parseConfig({ pipeline: { dp_size: -1 } }, {})).toThrow(/pipeline\.dp_size/);
  });
});

describe('pipeline.kv_connector_params', () => {
  it("kv-sglang's bootstrap_port reaches the prefill leg", async () => {
    const { kv } = await prefillLeg({ kv_connector: 'kv-sglang', kv_connector_params: { bootstrap_port: 9100 } });
    expect(kv['bootstrap_port']).toBe(9100);
  });

  it('a step that names its own kv_connector does not inherit the map', async () => {
    const { kv } = await prefillLeg({
      kv_connector: 'kv-sglang',
      kv_connector_params: { bootstrap_port: 9100 },
      steps: [{ type: 'prefill', params: { kv_connector: 'kv-sglang' } }],
    });
    expect(kv['bootstrap_port']).not.toBe(9100);
  });

  it("a step's own map replaces the pipeline's", async () => {
    const { kv } = await prefillLeg({
      kv_connector: 'kv-sglang',
      kv_connector_params: { bootstrap_port: 9100 },
      steps: [{ type: 'prefill', params: { kv_connector_params: { bootstrap_port: 9200 } } }],
    });
    expect(kv['bootstrap_port']).toBe(9200);
  });

  it.each([
    [{ kv_connector: 'kv-nixl', kv_connector_params: { bootstrap_port: 9100 } }, /kv_connector_params/],
    [{ kv_connector: 'kv-sglang', kv_connector_params: { bootstrap_prot: 9100 } }, /bootstrap_prot/],
    [{ kv_connector: 'kv-sglang', kv_connector_params: { bootstrap_port: 65536 } }, /bootstrap_port/],
    [{ kv_connector: 'kv-sglang', kv_connector_params: 9100 }, /pipeline\.kv_connector_params/],
  ])('%j stops start-up naming the problem', (pipeline, message) => {
    const err = (() => {
      try {
        prefillFrom(pipeline);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(message);
  });

  it('an empty map counts as absent', () => {
    const cfg = parseConfig({ pipeline: { kv_connector: 'kv-nixl', kv_connector_params: {} } }, {});
    expect(cfg.pipeline.kvConnectorParams).toBeUndefined();
    const settings: PipelineSettings = { ...cfg.pipeline, steps: [{ type: 'prefill', params: {} } as StepConfig] };
    expect(() => buildPipeline(settings, registry, up.td.deps)).not.toThrow();
  });
});

describe('steps that take no connector', () => {
  it('accept the pipeline settings handed to every step (async-broker checks its params strictly)', () => {
    const cfg = parseConfig(
      {
        gateway: { address: gateway.url },
        pipeline: {
          kv_connector: 'kv-sglang',
          dp_size: 2,
          kv_connector_params: { bootstrap_port: 9100 },
          steps: [
            { type: 'async-broker', params: { redis_url: 'redis://127.0.0.1:9/0' } },
            { type: 'render', params: { address: gateway.url } },
            { type: 'prefill-decode' },
          ],
        },
      },
      {},
    );
    const steps = buildPipeline(cfg.pipeline, registry, up.td.deps);
    expect(steps.map((s) => s.type)).toEqual(['async-broker', 'render', 'prefill-decode']);
  });
});
