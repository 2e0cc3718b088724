/**
 * `data:` image URLs: `data:<mediatype>[;params],<payload>`, base64 only, and only
 * the image types a vision model takes. The payload is not decoded here: it is forwarded as is.
 */

/** Media types a `data:` URL may carry. Anything else (HTML, SVG, scripts, audio) is refused. */
export const ALLOWED_IMAGE_CONTENT_TYPES: ReadonlySet<string> = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);

export class DataUriError extends Error {
  override readonly name = 'DataUriError';
}

export interface ParsedDataUri {
  /** Lower-cased and trimmed. */
  readonly contentType: string;
  /** Everything after the first comma, untouched. */
  readonly base64: string;
}

/** Whether `uri` is handled as inline data rather than downloaded (prefix is case-sensitive, as upstream). */
export function isDataUri(uri: string): boolean {
  return uri.startsWith('data:');
}

/** Splits a `data:` URL. Throws {@link DataUriError} on a missing comma, base64 flag or media type. */
export function parseDataUri(uri: string): ParsedDataUri {
  const rest = uri.startsWith('data:') ? uri.slice(5) : uri;
  const comma = rest.indexOf(',');
  if (comma < 0) throw new DataUriError('missing comma in data URI');
  const meta = rest.slice(0, comma);
  const semi = meta.indexOf(';');
  const mediaType = semi < 0 ? meta : meta.slice(0, semi);
  const params = semi < 0 ? [] : meta.slice(semi + 1).split(';');
  if (!params.some((p) => p.trim().toLowerCase() === 'base64')) throw new DataUriError('data URI must be base64-encoded');
  if (mediaType === '') throw new DataUriError('data URI missing media type');
  return { contentType: mediaType.trim().toLowerCase(), base64: rest.slice(comma + 1) };
}

export function isAllowedImageContentType(contentType: string): boolean {
  return ALLOWED_IMAGE_CONTENT_TYPES.has(contentType.trim().toLowerCase());
}
