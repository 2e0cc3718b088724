/**
 * The `async-broker` step: request-level queueing over Redis, wire-compatible with llm-d-async.
 * See docs/async-broker.md for the behaviour and the choices made against upstream.
 */
import { ConfigError } from '../../config/errors';
import type { StepDeps, StepFactory, StepParams } from '../../pipeline/step';
import { parseAsyncBrokerConfig, STEP_NAME } from './config';
import { AsyncBrokerStep } from './step';

export const ASYNC_BROKER_STEP = STEP_NAME;

export { AsyncBrokerStep } from './step';
export type { AsyncBrokerConfig } from './config';

/**
 * Validates the params (unknown keys rejected; the injected `kv_connector`, `ec_connector` and
 * `use_openai_format` accepted), registers the step's routes, and returns the step. No Redis
 * traffic happens here: call `start()` on the returned step to connect and fail fast.
 */
export const createAsyncBrokerStep: StepFactory = (params: StepParams, deps: StepDeps): AsyncBrokerStep => {
  const config = parseAsyncBrokerConfig(params);
  const step = new AsyncBrokerStep(config, deps.log.child({ step: STEP_NAME }));
  step.registerRoutes(deps.registerRoute);
  return step;
};

/**
 * The later upstream revision's rule: the step must run first, because it must see (and may answer)
 * the request before any other step touches it. `types` are the configured step types in order.
 */
export function assertAsyncBrokerFirst(types: readonly string[]): void {
  types.forEach((type, i) => {
    if (type === ASYNC_BROKER_STEP && i !== 0) {
      throw new ConfigError(
        `pipeline.steps[${i}].type`,
        `the "async-broker" step must be the first pipeline step, found it at position ${i + 1}`,
        type,
      );
    }
  });
}
