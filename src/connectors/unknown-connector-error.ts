import { ConfigError } from '../config/errors';

/**
 * A step names a connector that does not exist. A {@link ConfigError} (start-up fails), with
 * upstream's message text: `prefill: unknown kv_connector: "x"`.
 */
export class UnknownConnectorError extends ConfigError {
  constructor(step: string, kind: 'kv_connector' | 'ec_connector', name: string, known: readonly string[]) {
    super(`${step}.params.${kind}`, `one of ${known.join(', ')}`, name);
    this.message = `${step}: unknown ${kind}: ${JSON.stringify(name)}`;
  }
}
