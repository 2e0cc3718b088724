/** The force-stream SSE reassembler, SSE framing, budget and params (reference §12.3). */
import { ParamReader } from '../../../../src/pipeline/params';
import { ReservationBudget, reservationBytes } from '../../../../src/steps/force-stream/budget';
import { ForceStreamError } from '../../../../src/steps/force-stream/errors';
import { choiceCount, isLossy, readForceStreamConfig, shapeForPath, tokenLimit } from '../../../../src/steps/force-stream/force-stream';
import { IncrementalReply } from '../../../../src/steps/force-stream/incremental';
import { Reassembler } from '../../../../src/steps/force-stream/reassemble';
import { sseFrames, type SseFrame } from '../../../../src/steps/force-stream/sse';

async function* chunks(...parts: string[]): AsyncGenerator<Buffer> {
  for (const p of parts) yield Buffer.from(p);
}
async function collect(body: AsyncIterable<Buffer>, cap = 1 << 20): Promise<SseFrame[]> {
  const out: SseFrame[] = [];
  for await (const f of sseFrames(body, cap)) out.push(f);
  return out;
}
const sse = (frames: unknown[], done = true): string =>
  frames.map((f) => `data: ${JSON.stringify(f)}\n\n`).join('') + (done ? 'data: [DONE]\n\n' : '');
const fold = (r: Reassembler, frames: SseFrame[]): Record<string, unknown> => {
  for (const f of frames) r.add(f);
  return r.result();
};

describe('SSE framing', () => {
  it('reads data lines split across chunks, CRLF or LF, ignoring comments, events and blank payloads', async () => {
    const frames = await collect(
      chunks('data: {"a"', ':1}\r\n\r\n: comment\nevent: x\nid: 7\ndata:\n', 'data:{"b":2}\n', 'data: [DONE]\n', 'data: {"after":1}\n'),
    );
    expect(frames).toEqual([{ a: 1 }, { b: 2 }]);
  });
  it('ends normally without [DONE], including a last line without a newline', async () => {
    expect(await collect(chunks('data: {"a":1}\n\ndata: {"b":2}'))).toEqual([{ a: 1 }, { b: 2 }]);
  });
  it('fails on a payload that is not a JSON object', async () => {
    await expect(collect(chunks('data: [1,2]\n'))).rejects.toMatchObject({ kind: 'parse' });
    await expect(collect(chunks('data: {nope\n'))).rejects.toThrow(/force-stream: parse frame/);
  });
  it('aborts a line above the cap as a ceiling error, without waiting for its end', async () => {
    await expect(collect(chunks('data: "' + 'x'.repeat(100)), 50)).rejects.toMatchObject({ kind: 'ceiling' });
  });
  it('reports a failing upstream body as a read error', async () => {
    async function* broken(): AsyncGenerator<Buffer> {
      yield Buffer.from('data: {"a":1}\n');
      throw new Error('socket reset');
    }
    await expect(collect(broken())).rejects.toThrow('force-stream: read upstream: socket reset');
  });
});

describe('Reassembler', () => {
  it('chat: envelope first-wins, role, content appended, finish_reason, merged usage', async () => {
    const frames = await collect(
      chunks(
        sse([
          {
            id: 'c1',
            model: 'm',
            created: 5,
            system_fingerprint: 'fp',
            choices: [{ index: 0, delta: { role: 'assistant', content: 'Hello' } }],
          },
          { id: 'other', model: 'm2', choices: [{ index: 0, delta: { content: ' world' }, finish_reason: null }] },
          { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
          { choices: [], usage: { prompt_tokens: 3, completion_tokens: 7, total_tokens: null } },
          { choices: [], usage: { total_tokens: 10 } },
        ]),
      ),
    );
    const r = new Reassembler('chat', 1);
    expect(fold(r, frames)).toEqual({
      id: 'c1',
      model: 'm',
      system_fingerprint: 'fp',
      created: 5,
      object: 'chat.completion',
      choices: [{ index: 0, logprobs: null, finish_reason: 'stop', message: { role: 'assistant', content: 'Hello world' } }],
      usage: { prompt_tokens: 3, completion_tokens: 7, total_tokens: 10 },
    });
    expect(r.bufferedBytes).toBe(11);
  });
  it('chat, several choices: ordered by index, indices at or above n dropped and not counted', () => {
    const r = new Reassembler('chat', 2);
    const out = fold(r, [
      {
        choices: [
          { index: 1, delta: { content: 'B1' } },
          { index: 0, delta: { content: 'A1' } },
        ],
      },
      { choices: [{ index: 2, delta: { content: 'CCCC' } }] },
      {
        choices: [
          { index: 0, delta: { content: 'A2' } },
          { index: 1, delta: { content: 'B2' } },
        ],
      },
    ]);
    expect((out['choices'] as Array<{ message: { content: string } }>).map((c) => c.message.content)).toEqual(['A1A2', 'B1B2']);
    expect(r.bufferedBytes).toBe(8);
  });
  it('text: text appended, object kept (or text_completion), byte count in UTF-8', () => {
    const r = new Reassembler('text', 1);
    expect(
      fold(r, [
        { id: 't', object: 'text_completion.chunk', choices: [{ text: 'héllo' }] },
        { choices: [{ text: '!', finish_reason: 'length' }] },
      ]),
    ).toEqual({
      id: 't',
      object: 'text_completion.chunk',
      choices: [{ index: 0, logprobs: null, finish_reason: 'length', text: 'héllo!' }],
    });
    expect(r.bufferedBytes).toBe(7);
    expect(fold(new Reassembler('text', 1), [{ choices: [{ text: 'x' }] }])['object']).toBe('text_completion');
  });
  it('generate: request_id envelope, token ids appended (16 bytes each), no object or usage', () => {
    const r = new Reassembler('generate', 1);
    const out = fold(r, [
      { request_id: 'r1', choices: [{ index: 0, token_ids: [1, 2], finish_reason: null }] },
      { request_id: 'r2', choices: [{ index: 0, token_ids: [3], finish_reason: 'length' }] },
      { request_id: 'r1', choices: [], usage: { completion_tokens: 3 } },
    ]);
    expect(out).toEqual({
      request_id: 'r1',
      prompt_logprobs: null,
      kv_transfer_params: null,
      choices: [{ index: 0, logprobs: null, finish_reason: 'length', token_ids: [1, 2, 3] }],
    });
    expect(r.bufferedBytes).toBe(48);
  });
  it('responses: the completed object verbatim, or the deltas in a message', () => {
    const completed = { id: 'resp_1', status: 'completed', output: [] };
    expect(
      fold(new Reassembler('responses', 1), [
        { type: 'response.created', response: { id: 'resp_1' } },
        { type: 'response.output_text.delta', delta: 'Hi' },
        { type: 'response.completed', response: completed },
      ]),
    ).toEqual(completed);
    expect(
      fold(new Reassembler('responses', 1), [
        { type: 'response.created', response: { id: 'resp_2', model: 'm' } },
        { type: 'response.output_text.delta', delta: 'Hi' },
        { type: 'response.output_text.delta', delta: ' there' },
      ]),
    ).toEqual({
      status: 'completed',
      output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hi there' }] }],
      id: 'resp_2',
      model: 'm',
    });
  });
});

describe('IncrementalReply', () => {
  const frames: SseFrame[] = [
    { id: 'c1', model: 'm', created: 9, choices: [{ index: 0, delta: { role: 'assistant' } }] },
    { id: 'late', choices: [{ index: 0, delta: { content: 'Hello <world>' } }] },
    { choices: [{ index: 0, delta: { content: ' "q" & \u2028' }, finish_reason: 'stop' }] },
    { choices: [], usage: { completion_tokens: 4 } },
  ];
  it('writes JSON that parses equal to the buffered reply, escaped as Go escapes', () => {
    const reply = new IncrementalReply('chat');
    const written: Buffer[] = [];
    for (const f of frames) {
      const b = reply.add(f);
      if (b) written.push(b);
    }
    expect(written).toHaveLength(2);
    written.push(reply.finish());
    const text = Buffer.concat(written).toString();
    expect(text).toContain('\\u003cworld\\u003e');
    expect(text).toContain('\\u0026');
    const buffered = new Reassembler('chat', 1);
    for (const f of frames) buffered.add(f);
    expect(JSON.parse(text)).toEqual(buffered.result());
  });
  it('text with no content at all is still a whole reply', () => {
    const reply = new IncrementalReply('text');
    expect(reply.add({ choices: [{ index: 0, text: '', finish_reason: 'length' }] })).toBeNull();
    expect(JSON.parse(reply.finish().toString())).toEqual({
      object: 'text_completion',
      choices: [{ index: 0, logprobs: null, text: '', finish_reason: 'length' }],
    });
  });
});

describe('decision inputs and reservation', () => {
  it('shapes by path; other APIs are not handled', () => {
    expect(shapeForPath('/v1/chat/completions')).toBe('chat');
    expect(shapeForPath('/v1/completions?x=1')).toBe('text');
    expect(shapeForPath('/inference/v1/generate')).toBe('generate');
    expect(shapeForPath('/v1/responses')).toBe('responses');
    expect(shapeForPath('/v1/messages')).toBeNull();
  });
  it('lossy requests: tools, functions, logprobs true or any number', () => {
    expect(isLossy({ tools: [{}] })).toBe(true);
    expect(isLossy({ functions: [{}] })).toBe(true);
    expect(isLossy({ logprobs: true })).toBe(true);
    expect(isLossy({ logprobs: 0 })).toBe(true);
    expect(isLossy({ tools: [], logprobs: false })).toBe(false);
  });
  it('token limit and choice count per API', () => {
    expect(tokenLimit('chat', { max_tokens: null, max_completion_tokens: 9 })).toBe(9);
    expect(tokenLimit('generate', { max_tokens: 5 })).toBeNull();
    expect(tokenLimit('generate', { sampling_params: { max_tokens: 5 } })).toBe(5);
    expect(tokenLimit('responses', { max_output_tokens: 1.5 })).toBeNull();
    expect(choiceCount('chat', { n: 3 })).toBe(3);
    expect(choiceCount('chat', { n: 0 })).toBe(1);
    expect(choiceCount('generate', { sampling_params: { n: 2 } })).toBe(2);
  });
  it('reservation arithmetic (§12.3.3)', () => {
    expect(reservationBytes(262144, 10, 1)).toBe(2464);
    expect(reservationBytes(262144, 16240, 1)).not.toBeNull();
    expect(reservationBytes(262144, 16241, 1)).toBeNull();
    expect(reservationBytes(2048, 1, 1)).toBeNull();
    expect(reservationBytes(4096, 100000, 1)).toBeNull();
  });
  it('the budget admits reservations up to its total and releases each once', () => {
    const seen: number[] = [];
    const b = new ReservationBudget(5000, (n) => seen.push(n));
    const r1 = b.tryReserve(2464)!;
    const r2 = b.tryReserve(2464)!;
    expect(b.tryReserve(2464)).toBeNull();
    r1();
    r1();
    r2();
    expect(b.reservedBytes).toBe(0);
    expect(seen).toEqual([2464, 4928, 2464, 0]);
  });
});

describe('params', () => {
  const read = (params: Record<string, unknown>) => readForceStreamConfig('decode', new ParamReader('decode', params), params);
  it('absent or false: off; on: 1 GiB budget, 256 KiB cap (or the budget when smaller)', () => {
    expect(read({})).toBeNull();
    expect(read({ force_stream: false })).toBeNull();
    // The sizes are read only when force_stream is on.
    expect(read({ force_stream: false, force_stream_buffer_size: 'abc' })).toBeNull();
    expect(read({ force_stream: true })).toEqual({ bufferBytes: 1024 ** 3, maxRequestBytes: 256 * 1024 });
    expect(read({ force_stream: true, force_stream_buffer_size: '100KB' })).toEqual({ bufferBytes: 100_000, maxRequestBytes: 100_000 });
  });
  it.each([
    [{ force_stream: 'yes' }, /force_stream: expected true or false/],
    [{ force_stream: true, force_stream_buffer_size: '0' }, /greater than zero/],
    [{ force_stream: true, force_stream_buffer_size: '-1GiB' }, /force_stream_buffer_size/],
    [{ force_stream: true, force_stream_buffer_size: 'abc' }, /force_stream_buffer_size/],
    [{ force_stream: true, force_stream_max_request_size: '0' }, /greater than zero/],
    [{ force_stream: true, force_stream_max_request_size: 'nope' }, /force_stream_max_request_size/],
    [{ force_stream: true, force_stream_max_request_size: '2GiB', force_stream_buffer_size: '1GiB' }, /not above force_stream_buffer_size/],
    [{ force_stream: true, force_stream_buffer_size: 1024 }, /size string/],
  ])('%j is a start-up error', (params, message) => {
    expect(() => read(params)).toThrow(message);
  });
});

it('ForceStreamError is a 502-class upstream error', () => {
  expect(new ForceStreamError('ceiling', 'x').message).toBe('force-stream: x');
});
