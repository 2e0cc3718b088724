/** Which requests the pipeline runs: the inference routes. Every other request passes through. */
export const INFERENCE_PATHS: ReadonlySet<string> = new Set([
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/responses',
  '/inference/v1/generate',
]);

export function stripQuery(path: string): string {
  const q = path.indexOf('?');
  return q < 0 ? path : path.slice(0, q);
}

/** Is this request one the pipeline runs (rather than a step's route or a pass-through)? */
export function isInferenceRequest(method: string, path: string): boolean {
  return method === 'POST' && INFERENCE_PATHS.has(stripQuery(path));
}
