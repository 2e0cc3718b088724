import { ConfigError } from '../config/errors';
import type { SideCallClient } from '../pipeline/side-call';
import type { StepDeps } from '../pipeline/step';

/** Gateway-facing steps cannot be built without a gateway client (reference §3.0). */
export function requireGateway(step: string, deps: StepDeps): SideCallClient {
  const gateway = (deps as { gateway?: SideCallClient | null }).gateway;
  if (!gateway) throw new ConfigError(`${step}`, 'a gateway client (set gateway.address)');
  return gateway;
}
