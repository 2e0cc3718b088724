import { classify, UpstreamError } from '../../../src/pipeline/errors';
import { sanitiseUpstreamMessage, upstreamClientMessage, UPSTREAM_MESSAGE_MAX_CHARS } from '../../../src/pipeline/upstream-message';

describe('the message of a worker 4xx', () => {
  it.each([
    [
      'vLLM / llm-d-inference-sim',
      { error: { message: 'messages: field required', type: 'BadRequestError', code: 400 } },
      'messages: field required',
    ],
    ['older vLLM, top-level', { object: 'error', message: 'The model `x` does not exist.', code: 404 }, 'The model `x` does not exist.'],
    ["FastAPI's route-not-found", { detail: 'Not Found' }, 'Not Found'],
  ])('%s: the message string', (_who, body, expected) => {
    expect(upstreamClientMessage(JSON.stringify(body))).toBe(expected);
  });

  it.each([
    ['plain text', 'bad request: secret'],
    ['HTML', '<html>secret</html>'],
    ['truncated JSON', '{"error":{"message":"sec'],
    ['a JSON array', '["secret"]'],
    ['a message that is not a string', JSON.stringify({ error: { message: { secret: 1 } } })],
    ["a validation detail list (holds the client's input)", JSON.stringify({ detail: [{ loc: ['body'], input: 'secret' }] })],
    ['only other fields', JSON.stringify({ error: { type: 'x', secret: 'secret' } })],
    ['an empty message after cleaning', JSON.stringify({ error: { message: '\u0000\u200b\n' } })],
  ])('%s: nothing', (_what, body) => {
    expect(upstreamClientMessage(body)).toBeUndefined();
  });

  it('error.message wins over the others; nothing else of the body is kept', () => {
    const body = JSON.stringify({ error: { message: 'first', param: 'secret' }, message: 'second', detail: 'third', secret: 'x' });
    expect(upstreamClientMessage(body)).toBe('first');
  });

  it('control, format and unpaired-surrogate characters go; line breaks become spaces', () => {
    expect(sanitiseUpstreamMessage('a\u0000b\u0007c\u001b[31md\u007f\u0085e\u202eF\u200bG\ud800H')).toBe('abc[31mdeFGH');
    expect(sanitiseUpstreamMessage('1 validation error\nmessages\n  Field required\r\n')).toBe(
      '1 validation error messages Field required',
    );
    expect(sanitiseUpstreamMessage('keeps ünïcødé, emoji 🙂 and CJK 漢字')).toBe('keeps ünïcødé, emoji 🙂 and CJK 漢字');
  });

  it(`is cut at ${UPSTREAM_MESSAGE_MAX_CHARS} characters, never inside a surrogate pair`, () => {
    expect(sanitiseUpstreamMessage('x'.repeat(5000))).toBe('x'.repeat(UPSTREAM_MESSAGE_MAX_CHARS));
    const emoji = sanitiseUpstreamMessage('🙂'.repeat(600));
    expect(Array.from(emoji)).toHaveLength(UPSTREAM_MESSAGE_MAX_CHARS);
    expect(emoji).toBe('🙂'.repeat(UPSTREAM_MESSAGE_MAX_CHARS));
  });
});

describe('classify: an upstream 4xx names the step, the status and what the worker said', () => {
  const body = JSON.stringify({ error: { message: 'messages: field required\u0000', secret: 'S3CRET' } });

  it('4xx: our shape, the step and status, then the sanitised message', () => {
    const c = classify(new UpstreamError('render', 400, body), 'r1');
    expect(c).toEqual({
      status: 400,
      errorClass: 'upstream_4xx',
      type: 'invalid_request_error',
      message: 'render rejected the request: HTTP 400: messages: field required (request_id: r1)',
      upstreamStatus: 400,
    });
    expect(classify(new UpstreamError('encode[1]', 422, 'not json S3CRET'), 'r2').message).toBe(
      'encode[1] rejected the request: HTTP 422 (request_id: r2)',
    );
  });

  it('5xx: a 502 with none of the body', () => {
    const c = classify(new UpstreamError('prefill', 503, body), 'r3');
    expect(c).toMatchObject({ status: 502, message: 'internal error (request_id: r3)' });
  });
});
