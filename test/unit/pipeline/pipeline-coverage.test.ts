/** What a configured pipeline cannot serve (issue #12): one start-up warning per gap, and a 400 for images without replace-media-urls. */
import { IMAGES_UNSUPPORTED_MESSAGE, pipelineCoverage } from '../../../src/steps/pipeline-coverage';
import { RequestContext } from '../../../src/pipeline/context';
import { BadRequestError } from '../../../src/pipeline/errors';
import { silentLogger } from '../../../src/observability/logger';

const ctx = (body: Record<string, unknown>) =>
  new RequestContext({
    requestId: 'r',
    originalPath: '/v1/chat/completions',
    headers: {},
    body,
    signal: new AbortController().signal,
    log: silentLogger(),
  });
const withImage = {
  model: 'm',
  messages: [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'hi' },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,AA==' } },
      ],
    },
  ],
};
const textOnly = { model: 'm', messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }] };

describe('pipelineCoverage', () => {
  test('the full E/P/D pipeline has no gap and refuses nothing', () => {
    const c = pipelineCoverage(['async-broker', 'replace-media-urls', 'render', 'conditional-decode', 'encode', 'prefill', 'decode']);
    expect(c.warnings).toEqual([]);
    expect(c.admit).toBeUndefined();
  });

  test('without replace-media-urls: one warning naming it, and an image request is a 400; text passes', () => {
    const c = pipelineCoverage(['render', 'prefill', 'decode']);
    expect(c.warnings).toEqual([expect.stringContaining('no "replace-media-urls" step: chat requests with images get 400')]);
    expect(() => c.admit!(ctx(withImage))).toThrow(new BadRequestError(IMAGES_UNSUPPORTED_MESSAGE));
    expect(() => c.admit!(ctx(textOnly))).not.toThrow();
    expect(() => c.admit!(ctx({ prompt: 'completions have no images' }))).not.toThrow();
  });

  test.each([
    [
      ['replace-media-urls', 'render', 'prefill', 'decode'],
      ['no "encode": images are encoded by the prefill (or decode) workers themselves'],
    ],
    [
      ['render', 'encode', 'prefill', 'decode'],
      ['no "replace-media-urls" step', 'has "encode" but no "replace-media-urls"'],
    ],
    [['replace-media-urls', 'encode', 'prefill', 'decode'], ['has "encode" but no "render"']],
    [['replace-media-urls', 'render', 'encode', 'prefill'], ['no "decode" (or "prefill-decode") step']],
  ])('%j warns: %j', (types, expected) => {
    const { warnings } = pipelineCoverage(types);
    expect(warnings).toHaveLength(expected.length);
    expected.forEach((text, i) => expect(warnings[i]).toContain(text));
  });
});
