import { ConfigError } from '../config/errors';
import type { Step, StepDeps, StepFactory, StepParams } from './step';

/** Step factories by type name. Steps register themselves from `src/steps/index.ts`. */
export class StepRegistry {
  private readonly factories = new Map<string, StepFactory>();

  register(type: string, factory: StepFactory): this {
    if (this.factories.has(type)) throw new Error(`step type registered twice: ${type}`);
    this.factories.set(type, factory);
    return this;
  }

  types(): string[] {
    return [...this.factories.keys()];
  }

  build(type: string, params: StepParams, deps: StepDeps, position: number): Step {
    const factory = this.factories.get(type);
    if (!factory) {
      throw new ConfigError(`pipeline.steps[${position}].type`, `a known step type (${this.types().join(', ')})`, type);
    }
    return factory(params, deps);
  }
}
