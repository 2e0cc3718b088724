/** Error kinds of the worker simulator. */

/** Bad simulator options or fault rules (from code, the CLI or the control API). */
export class SimulatorConfigError extends Error {
  override readonly name = 'SimulatorConfigError';
}

/** A request the simulator answers with an OpenAI-style JSON error. */
export class HttpError extends Error {
  override readonly name = 'HttpError';
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** `waitForRequests` / `waitForClose` ran out of time. */
export class WaitTimeoutError extends Error {
  override readonly name = 'WaitTimeoutError';
}
