/**
 * The shape of an HTTP answer, for comparing two workers' answers to the same request without
 * comparing values (test/peers/sim-parity.test.ts): key sets and value types, recursively.
 */

/** A JSON value's shape: `'string' | 'number' | 'boolean' | 'null'`, an object of shapes, or `['array', ...element shapes]`. */
export type Shape = string | { readonly [key: string]: Shape } | readonly Shape[];

export function shapeOf(value: unknown): Shape {
  if (value === null) return 'null';
  if (Array.isArray(value)) {
    // The distinct element shapes, in a stable order: lengths are values, not shape.
    const seen = new Map<string, Shape>();
    for (const v of value) {
      const s = shapeOf(v);
      seen.set(JSON.stringify(s), s);
    }
    return ['array', ...[...seen.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([, s]) => s)];
  }
  if (typeof value === 'object') {
    const out: Record<string, Shape> = {};
    for (const key of Object.keys(value as object).sort()) out[key] = shapeOf((value as Record<string, unknown>)[key]);
    return out;
  }
  return typeof value;
}

/** One SSE event: its `event:` name (or `-`) and its data's shape (`[DONE]` as itself). */
export interface EventShape {
  readonly event: string;
  readonly data: Shape;
}

/** The events of an SSE body in order, runs of equal consecutive shapes collapsed to one (token counts are values). */
export function sseShapes(text: string): EventShape[] {
  const out: EventShape[] = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    let event = '-';
    const data: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).trim());
    }
    if (data.length === 0) continue;
    const raw = data.join('\n');
    let shape: Shape;
    try {
      shape = raw === '[DONE]' ? '[DONE]' : shapeOf(JSON.parse(raw));
    } catch {
      shape = 'not json';
    }
    const prev = out.at(-1);
    if (prev && prev.event === event && JSON.stringify(prev.data) === JSON.stringify(shape)) continue;
    out.push({ event, data: shape });
  }
  return out;
}

/** What is compared of an answer: the status, the kind of body, and its shape. */
export interface AnswerShape {
  readonly status: number;
  readonly body: 'json' | 'sse' | 'text';
  readonly shape: Shape | EventShape[];
}

export async function answerShape(res: Response): Promise<AnswerShape> {
  const type = res.headers.get('content-type') ?? '';
  const text = await res.text();
  if (type.includes('text/event-stream')) return { status: res.status, body: 'sse', shape: sseShapes(text) };
  try {
    return { status: res.status, body: 'json', shape: shapeOf(JSON.parse(text)) };
  } catch {
    return { status: res.status, body: 'text', shape: 'text' };
  }
}
