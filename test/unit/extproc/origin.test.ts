/**
 * The stream's origin comes from the gRPC metadata Envoy's filter adds (`x-epd-origin`), never from
 * the request: a plain name or nothing.
 */
import * as grpc from '@grpc/grpc-js';
import { ORIGIN_METADATA_KEY, streamOrigin } from '../../../src/extproc/origin';
import { decodeRequestHead } from '../../../src/extproc/headers';

function metadata(...values: string[]): grpc.Metadata {
  const md = new grpc.Metadata();
  for (const v of values) md.add(ORIGIN_METADATA_KEY, v);
  return md;
}

test('one plain name is the origin', () => {
  expect(streamOrigin({ metadata: metadata('async-processor') })).toBe('async-processor');
});

test('no marker, several markers, or a value that is not a plain name: no origin', () => {
  expect(streamOrigin({ metadata: new grpc.Metadata() })).toBeUndefined();
  expect(streamOrigin({})).toBeUndefined();
  expect(streamOrigin({ metadata: metadata('async-processor', 'async-processor') })).toBeUndefined();
  for (const bad of ['', 'Async-Processor', 'async processor', '-x', 'a'.repeat(64), 'a/b'])
    expect(streamOrigin({ metadata: metadata(bad) })).toBeUndefined();
});

test("a request header of the same name is only a header: the head's origin is what the stream says", () => {
  const map = {
    headers: [
      { key: ':path', value: '/v1/chat/completions', raw_value: Buffer.alloc(0) },
      { key: 'x-epd-origin', value: '', raw_value: Buffer.from('async-processor') },
    ],
  };
  expect(decodeRequestHead(map).origin).toBeUndefined();
  expect(decodeRequestHead(map, 'async-processor').origin).toBe('async-processor');
});

test('a repeated header: the first value is read, the later ones (which Envoy forwards too) are handed on', () => {
  const entry = (key: string, value: string) => ({ key, value: '', raw_value: Buffer.from(value, 'latin1') });
  const head = decodeRequestHead({
    headers: [
      entry('x-a', 'ok'),
      entry('x-a', 'second'),
      entry('x-b', 'ok'),
      entry('x-b', '\xff\xff'),
      entry('x-b', 'third'),
      entry('x-c', 'once'),
    ],
  });
  expect(head.headers).toEqual({ 'x-a': 'ok', 'x-b': 'ok', 'x-c': 'once' });
  expect(head.laterValues).toEqual({ 'x-a': ['second'], 'x-b': ['\xff\xff', 'third'] });
  expect(decodeRequestHead({ headers: [entry('x-a', 'ok')] })).not.toHaveProperty('laterValues');
});
