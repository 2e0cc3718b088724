/**
 * The floor of the ext_proc transport in Node: a bare `node:http2` server that speaks the one bidi
 * method Envoy calls, with no gRPC library. It frames and parses the protobuf by hand, only as far as
 * FULL_DUPLEX_STREAMED needs: it collects the request body and answers what a forward answers (a
 * headers response with a header mutation, then the body as one streamed chunk), then ends the call
 * with grpc-status 0 once Envoy half-closes. Everything a real service does on top of this is the
 * distance the budget bench shows. With an `answer` function it is the floor of a whole
 * coordinator too (compare/bare-coordinator.ts): the body it forwards is what `answer` returns.
 */
import * as http2 from 'node:http2';

/** Reads a varint at `at`; returns [value, next offset]. */
function varint(b: Buffer, at: number): [number, number] {
  let v = 0;
  let shift = 0;
  for (;;) {
    const byte = b[at++]!;
    v += (byte & 0x7f) * 2 ** shift;
    if (byte < 0x80) return [v, at];
    shift += 7;
  }
}

function encodeVarint(n: number): Buffer {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Buffer.from(out);
}

/** A length-delimited field. */
function field(tag: number, bytes: Buffer): Buffer {
  return Buffer.concat([encodeVarint((tag << 3) | 2), encodeVarint(bytes.length), bytes]);
}

interface Fields {
  /** Length-delimited fields by number (last wins), and varints by number. */
  readonly bytes: Map<number, Buffer>;
  readonly ints: Map<number, number>;
}

function parse(b: Buffer): Fields {
  const bytes = new Map<number, Buffer>();
  const ints = new Map<number, number>();
  let at = 0;
  while (at < b.length) {
    const [key, next] = varint(b, at);
    at = next;
    const tag = Math.floor(key / 8);
    switch (key & 7) {
      case 0: {
        const [v, n] = varint(b, at);
        ints.set(tag, v);
        at = n;
        break;
      }
      case 2: {
        const [len, n] = varint(b, at);
        bytes.set(tag, b.subarray(n, n + len));
        at = n + len;
        break;
      }
      case 1:
        at += 8;
        break;
      case 5:
        at += 4;
        break;
      default:
        throw new Error(`wire type ${key & 7}`);
    }
  }
  return { bytes, ints };
}

/** `headers response: set epp-profile: decode, remove content-length, clear the route cache`, encoded once. */
const HEADERS_RESPONSE = (() => {
  const headerValue = Buffer.concat([field(1, Buffer.from('epp-profile')), field(3, Buffer.from('decode'))]);
  const option = field(1, headerValue);
  const mutation = Buffer.concat([field(1, option), field(2, Buffer.from('content-length'))]);
  const common = Buffer.concat([field(2, mutation), Buffer.from([(5 << 3) | 0, 1])]);
  return field(1, field(1, common));
})();

/** ProcessingResponse.request_body{response{body_mutation{streamed_response{body, end_of_stream: true}}}}. */
function bodyResponse(body: Buffer): Buffer {
  const streamed = Buffer.concat([field(1, body), Buffer.from([(2 << 3) | 0, 1])]);
  return field(3, field(1, field(3, field(3, streamed))));
}

function frame(msg: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  return Buffer.concat([head, msg]);
}

/** What the bare server forwards for a request body: the body itself, or another one. */
export type Answer = (body: Buffer) => Buffer | Promise<Buffer>;

const sameBody: Answer = (body) => body;

function onStream(stream: http2.ServerHttp2Stream, answer: Answer): void {
  stream.on('error', () => undefined);
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
  let pending: Buffer = Buffer.alloc(0);
  const body: Buffer[] = [];
  stream.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.length >= 5) {
      const len = pending.readUInt32BE(1);
      if (pending.length < 5 + len) break;
      const req = parse(pending.subarray(5, 5 + len));
      pending = pending.subarray(5 + len);
      const headers = req.bytes.get(2);
      const chunkMsg = req.bytes.get(4);
      if (headers && parse(headers).ints.get(3) === 1) {
        stream.write(frame(HEADERS_RESPONSE)); // a request without a body
      } else if (chunkMsg) {
        const b = parse(chunkMsg);
        const data = b.bytes.get(1);
        if (data) body.push(data);
        if (b.ints.get(2) === 1) {
          const reply = (out: Buffer) => {
            stream.write(frame(HEADERS_RESPONSE));
            stream.write(frame(bodyResponse(out)));
          };
          const out = answer(Buffer.concat(body));
          if (Buffer.isBuffer(out)) reply(out);
          else out.then(reply, () => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
        }
      }
    }
  });
  // Envoy half-closed (graceful close) or the request is over: end the call with OK.
  stream.on('end', () => stream.end());
}

/** Listens on 127.0.0.1:`port` (0 = any); resolves with the bound port. */
export function startBareExtProc(port: number, answer: Answer = sameBody): Promise<{ port: number; close(): void }> {
  // The same session limits and windows as ours (session-limits.ts, flow-control.ts): Envoy resets
  // every stream it is done with, which Node's default limiter would answer by closing the session.
  const server = http2.createServer({
    settings: { initialWindowSize: 4 * 1024 * 1024 },
    streamResetBurst: 100_000,
    streamResetRate: 10_000,
  } as http2.ServerOptions);
  server.on('stream', (stream) => onStream(stream, answer));
  server.on('session', (s) => {
    s.on('error', () => undefined);
    s.setLocalWindowSize(16 * 1024 * 1024);
  });
  return new Promise((resolve) => {
    server.listen(port, '127.0.0.1', () => {
      const addr = server.address();
      resolve({ port: typeof addr === 'object' && addr ? addr.port : port, close: () => server.close() });
    });
  });
}
