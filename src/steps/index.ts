import type { StepRegistry } from '../pipeline/registry';
import type { StepFactory } from '../pipeline/step';
import { ASYNC_BROKER_TYPE, asyncBrokerFactory } from './async-broker';
import { createConditionalDecodeStep } from './conditional-decode';
import { createDecodeStep } from './decode';
import { createEncodeStep } from './encode';
import { createPrefillStep } from './prefill';
import { createPrefillDecodeStep, PREFILL_DECODE_STEP } from './prefill-decode';
import { createRenderStep } from './render';
import { createReplaceMediaUrlsStep } from './replace-media-urls';

/** Every built-in step type. A new step is one file plus one line here. */
export const BUILTIN_STEPS: ReadonlyArray<readonly [type: string, factory: StepFactory]> = [
  [ASYNC_BROKER_TYPE, asyncBrokerFactory],
  ['replace-media-urls', createReplaceMediaUrlsStep],
  ['render', createRenderStep],
  ['conditional-decode', createConditionalDecodeStep],
  ['encode', createEncodeStep],
  ['prefill', createPrefillStep],
  ['decode', createDecodeStep],
  // Replaces prefill + decode for kv-sglang; the builder refuses it alongside them.
  [PREFILL_DECODE_STEP, createPrefillDecodeStep],
];

export function registerBuiltinSteps(registry: StepRegistry): StepRegistry {
  for (const [type, factory] of BUILTIN_STEPS) registry.register(type, factory);
  return registry;
}
