/** `data:` URL parsing and the image type allowlist (reference §3.1, §9.8 TestParseDataURI). */
import { DataUriError, isAllowedImageContentType, isDataUri, parseDataUri } from '../../../../src/steps/media/data-uri';

describe('parseDataUri', () => {
  it.each([
    ['data:image/png;base64,iVBORw0K', 'image/png', 'iVBORw0K'],
    ['data: IMAGE/JPEG ;base64,/9j/4AAQ', 'image/jpeg', '/9j/4AAQ'],
    ['data:image/webp;BASE64,UklGR', 'image/webp', 'UklGR'],
    ['data:image/gif;name=a.gif; base64 ,R0lGOD', 'image/gif', 'R0lGOD'],
    // Only the first comma splits; the payload is not validated.
    ['data:image/png;base64,a,b,c', 'image/png', 'a,b,c'],
  ])('%s -> %s', (uri, contentType, base64) => {
    expect(parseDataUri(uri)).toEqual({ contentType, base64 });
  });

  it.each([
    ['data:image/png;base64', 'missing comma in data URI'],
    ['data:image/png,iVBOR', 'data URI must be base64-encoded'],
    ['data:image/png;charset=utf-8,iVBOR', 'data URI must be base64-encoded'],
    ['data:;base64,iVBOR', 'data URI missing media type'],
  ])('%s is refused: %s', (uri, message) => {
    expect(() => parseDataUri(uri)).toThrow(new DataUriError(message));
  });
});

describe('image type allowlist', () => {
  it.each(['image/jpeg', 'image/png', 'image/gif', 'image/webp', ' Image/PNG '])('%s is allowed', (t) => {
    expect(isAllowedImageContentType(t)).toBe(true);
  });
  it.each(['text/html', 'image/svg+xml', 'application/javascript', 'audio/wav', 'video/mp4', 'image/png; x=y', ''])(
    '%s is refused',
    (t) => {
      expect(isAllowedImageContentType(t)).toBe(false);
    },
  );
  it('only a lower-case "data:" prefix is inline data (others are URLs with a disallowed scheme)', () => {
    expect(isDataUri('data:image/png;base64,AA')).toBe(true);
    expect(isDataUri('DATA:image/png;base64,AA')).toBe(false);
  });
});
