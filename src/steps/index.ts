import type { StepRegistry } from '../pipeline/registry';
import type { StepFactory } from '../pipeline/step';
import { ASYNC_BROKER_STEP, createAsyncBrokerStep } from './async-broker';
import { CONDITIONAL_DECODE_STEP, createConditionalDecodeStep } from './conditional-decode';
import { createDecodeStep, DECODE_STEP } from './decode';
import { createEncodeStep, ENCODE_STEP } from './encode';
import { createPrefillStep, PREFILL_STEP } from './prefill';
import { createPrefillDecodeStep, PREFILL_DECODE_STEP } from './prefill-decode';
import { createRenderStep, RENDER_STEP } from './render';
import { createReplaceMediaUrlsStep, REPLACE_MEDIA_URLS_STEP } from './replace-media-urls';

/**
 * Every built-in step type. A new step is one file plus one line here. Naming: each step file
 * exports `<NAME>_STEP` (its type name) and `create<Name>Step` (its factory).
 */
export const BUILTIN_STEPS: ReadonlyArray<readonly [type: string, factory: StepFactory]> = [
  [ASYNC_BROKER_STEP, createAsyncBrokerStep],
  [REPLACE_MEDIA_URLS_STEP, createReplaceMediaUrlsStep],
  [RENDER_STEP, createRenderStep],
  [CONDITIONAL_DECODE_STEP, createConditionalDecodeStep],
  [ENCODE_STEP, createEncodeStep],
  [PREFILL_STEP, createPrefillStep],
  [DECODE_STEP, createDecodeStep],
  // Replaces prefill + decode for kv-sglang; the builder refuses it alongside them.
  [PREFILL_DECODE_STEP, createPrefillDecodeStep],
];

export function registerBuiltinSteps(registry: StepRegistry): StepRegistry {
  for (const [type, factory] of BUILTIN_STEPS) registry.register(type, factory);
  return registry;
}
