import { ConfigError } from '../config/errors';
import type { SideCallClient } from '../pipeline/side-call';
import type { StepDeps } from '../pipeline/step';

/**
 * A step that sends side calls through the gateway cannot be built without one: start-up stops
 * with the missing key named, rather than every request failing later.
 */
export function requireGateway(step: string, deps: StepDeps): SideCallClient {
  if (!deps.gateway)
    throw new ConfigError('gateway.address', `an http:// or https:// URL (the "${step}" step sends its side calls to the gateway)`);
  return deps.gateway;
}
