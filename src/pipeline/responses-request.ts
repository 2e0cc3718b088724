/**
 * What the pipeline refuses in an OpenAI Responses request before any step runs, as upstream does:
 * server-side state the router cannot honour (a stored conversation, a background run, uploaded
 * files) would be silently wrong if passed on to a worker.
 */
import type { JsonObject } from './context';
import { BadRequestError } from './errors';

export const RESPONSES_API_PATH = '/v1/responses';

/** Part types whose `file_id` names an upload the router cannot fetch. */
const FILE_PART_TYPES: ReadonlySet<string> = new Set(['input_image', 'input_file', 'computer_screenshot']);

const unsupported = (name: string) => new BadRequestError(`field "${name}" is not supported by the router`);

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function checkPart(part: unknown): void {
  if (
    isObject(part) &&
    typeof part['type'] === 'string' &&
    FILE_PART_TYPES.has(part['type']) &&
    part['file_id'] !== undefined &&
    part['file_id'] !== null
  ) {
    throw unsupported('file_id');
  }
}

/** Throws a {@link BadRequestError} naming the first unsupported field. */
export function validateResponsesRequest(body: JsonObject): void {
  for (const name of ['previous_response_id', 'conversation']) {
    if (body[name] !== undefined && body[name] !== null) throw unsupported(name);
  }
  const background = body['background'];
  if (background !== undefined && background !== null && background !== false) throw unsupported('background');
  const input = body['input'];
  if (typeof input === 'string') return;
  if (!Array.isArray(input)) throw new BadRequestError('input must be a string or an array');
  // Parts may be input items themselves or sit in an item's content list.
  for (const item of input) {
    checkPart(item);
    if (isObject(item) && Array.isArray(item['content'])) for (const part of item['content'] as unknown[]) checkPart(part);
  }
}
