import type { StepRegistry } from '../pipeline/registry';
import type { StepFactory } from '../pipeline/step';
import { createDecodeStep } from './decode';
import { createPrefillStep } from './prefill';
import { createRenderStep } from './render';

/** Every built-in step type. A new step is one file plus one line here. */
export const BUILTIN_STEPS: ReadonlyArray<readonly [type: string, factory: StepFactory]> = [
  ['render', createRenderStep],
  ['prefill', createPrefillStep],
  ['decode', createDecodeStep],
];

export function registerBuiltinSteps(registry: StepRegistry): StepRegistry {
  for (const [type, factory] of BUILTIN_STEPS) registry.register(type, factory);
  return registry;
}
