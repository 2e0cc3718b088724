import type { StepConfig } from '../config/config';
import { ConfigError } from '../config/errors';
import type { StepRegistry } from './registry';
import type { Step, StepDeps } from './step';
import { STEPS } from '../config/reference';

/** Documented params per built-in step type (top-level names; `quota.prefix` counts as `quota`). */
const KNOWN_PARAMS: ReadonlyMap<string, ReadonlySet<string>> = new Map(
  STEPS.map((s) => [s.type, new Set(s.params.map((p) => p.name.split('.')[0]!))]),
);

/**
 * Upstream ignores params a step does not read, silently; a typo (`max_paralel`) then looks like
 * a working setting. Each is warned about once, at start-up, naming the step and the key. Step
 * types this build does not document (registered by an embedder) are not checked.
 */
export function unknownStepParams(steps: readonly StepConfig[]): string[] {
  const out: string[] = [];
  steps.forEach((cfg, i) => {
    const known = KNOWN_PARAMS.get(cfg.type);
    if (!known) return;
    for (const key of Object.keys(cfg.params)) {
      if (!known.has(key)) out.push(`unknown param "${key}" of step "${cfg.type}" (pipeline.steps[${i}].params.${key}) ignored`);
    }
  });
  return out;
}

/** The params the builder hands every step from the `pipeline:` section; a step may ignore them. */
export const PIPELINE_INJECTED_PARAMS: ReadonlySet<string> = new Set([
  'kv_connector',
  'ec_connector',
  'use_openai_format',
  'dp_size',
  'kv_connector_params',
]);

export interface PipelineSettings {
  readonly kvConnector: string | undefined;
  readonly ecConnector: string | undefined;
  readonly useOpenaiFormat: boolean;
  /** Handed to every step as `dp_size` unless it sets its own; 0 or absent hands nothing. */
  readonly dpSize?: number;
  /** Handed to every step that names no connector and no params of its own. */
  readonly kvConnectorParams?: Record<string, unknown>;
  readonly steps: readonly StepConfig[];
}

/**
 * Builds the ordered step list. As upstream, the pipeline-level `kv_connector`, `ec_connector`,
 * `use_openai_format` and `dp_size` are injected into every step's params unless the step sets its
 * own. `kv_connector_params` belongs to the pipeline's connector: a step that names its own
 * `kv_connector` does not inherit it, and a step's own map replaces it.
 */
export function buildPipeline(settings: PipelineSettings, registry: StepRegistry, deps: StepDeps): Step[] {
  if (!settings.useOpenaiFormat && !settings.steps.some((s) => s.type === 'render')) {
    throw new ConfigError(
      'pipeline.use_openai_format',
      'true, or a "render" step in pipeline.steps (the tokens-in format sends token IDs that render produces)',
      false,
    );
  }
  const asyncAt = settings.steps.findIndex((s) => s.type === 'async-broker');
  if (asyncAt > 0) {
    // It decides whether the request runs now at all, so nothing may run before it.
    throw new ConfigError(
      `pipeline.steps[${asyncAt}]`,
      `the "async-broker" step to be the first pipeline step, found it at position ${asyncAt + 1}`,
    );
  }
  checkPrefillDecode(settings.steps);
  for (const warning of unknownStepParams(settings.steps)) deps.log.warn(warning);
  return settings.steps.map((cfg, i) => {
    const params: Record<string, unknown> = { ...cfg.params };
    if (settings.kvConnector && params['kv_connector'] === undefined) params['kv_connector'] = settings.kvConnector;
    if (settings.ecConnector && params['ec_connector'] === undefined) params['ec_connector'] = settings.ecConnector;
    if (params['use_openai_format'] === undefined) params['use_openai_format'] = settings.useOpenaiFormat;
    if (settings.dpSize && params['dp_size'] === undefined) params['dp_size'] = settings.dpSize;
    if (settings.kvConnectorParams && cfg.params['kv_connector'] === undefined && params['kv_connector_params'] === undefined) {
      params['kv_connector_params'] = settings.kvConnectorParams;
    }
    try {
      return registry.build(cfg.type, params, deps, i);
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      throw new ConfigError(`pipeline.steps[${i}] (${cfg.type})`, 'valid params', (err as Error).message);
    }
  });
}

/**
 * `prefill-decode` runs prefill and hands the request to decode itself, so it
 * replaces the serial pair rather than joining it, and nothing can run after it: a later step would
 * act after the prefill was already sent (with whatever EC params it had) and on a decode body that
 * is already final.
 */
function checkPrefillDecode(steps: readonly StepConfig[]): void {
  const at = steps.findIndex((s) => s.type === 'prefill-decode');
  if (at < 0) return;
  const again = steps.findIndex((s, i) => i > at && s.type === 'prefill-decode');
  if (again >= 0) {
    throw new ConfigError(`pipeline.steps[${again}]`, `at most one "prefill-decode" step, found a second at position ${again + 1}`);
  }
  const serial = steps.findIndex((s) => s.type === 'prefill' || s.type === 'decode');
  if (serial >= 0) {
    throw new ConfigError(
      `pipeline.steps[${serial}]`,
      'either a "prefill-decode" step or the "prefill" and "decode" steps, not both (prefill-decode sends prefill and decode itself)',
      steps[serial]!.type,
    );
  }
  if (at < steps.length - 1) {
    throw new ConfigError(
      `pipeline.steps[${at + 1}]`,
      'no step after "prefill-decode" (it sends prefill and hands the request to decode, so it must be the last step)',
      steps[at + 1]!.type,
    );
  }
}
