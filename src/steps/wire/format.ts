/**
 * Wire-format resolution: which body shape and which path a leg uses.
 */

/** The body shapes the coordinator emits (`responses`: the OpenAI Responses API, reference §12.9). */
export type WireFormat = 'chat' | 'completions' | 'responses' | 'generate';

export const CHAT_COMPLETIONS_PATH = '/v1/chat/completions';
export const COMPLETIONS_PATH = '/v1/completions';
export const GENERATE_PATH = '/inference/v1/generate';
export const RESPONSES_PATH = '/v1/responses';

const PATHS: Readonly<Record<WireFormat, string>> = {
  chat: CHAT_COMPLETIONS_PATH,
  completions: COMPLETIONS_PATH,
  responses: RESPONSES_PATH,
  generate: GENERATE_PATH,
};

/**
 * The format a path names. Substring matches, as upstream, so a prefixed path such as
 * `/tenant/v1/chat/completions` still counts; anything unrecognised is generate.
 */
export function detectFormat(path: string): WireFormat {
  if (path.includes(CHAT_COMPLETIONS_PATH)) return 'chat';
  if (path.includes(COMPLETIONS_PATH)) return 'completions';
  if (path.includes(RESPONSES_PATH)) return 'responses';
  return 'generate';
}

/**
 * The format encode, prefill and decode shape their bodies in. Completions is always honoured;
 * with `use_openai_format: false` everything else collapses to generate, the tokens-in format.
 */
export function resolveFormat(useOpenAIFormat: boolean, path: string): WireFormat {
  const detected = detectFormat(path);
  if (detected === 'completions') return detected;
  if (!useOpenAIFormat) return 'generate';
  return detected;
}

/** The gateway path a leg in `format` is POSTed to (encode and prefill; decode keeps the client path). */
export function pathForFormat(format: WireFormat): string {
  return PATHS[format];
}
