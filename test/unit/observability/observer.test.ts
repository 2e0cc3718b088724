/** The pipeline's observation hooks: what the handler and executor report, in order, exactly once. */
import { PipelineHandler } from '../../../src/pipeline/handler';
import { combineObservers, NOOP_PIPELINE_OBSERVER, type PipelineObserver, type RequestResult } from '../../../src/pipeline/observer';
import type { Step } from '../../../src/pipeline/step';
import { silentLogger } from '../../../src/observability/logger';
import { answerLeft } from '../../support/after-answer';

function recorder(): { observer: PipelineObserver; events: string[]; results: RequestResult[] } {
  const events: string[] = [];
  const results: RequestResult[] = [];
  const observer: PipelineObserver = {
    decided: (path) => void events.push(`decided:${path}`),
    requestStarted: (start) => {
      events.push(`start:${start.method} ${start.path}`);
      return {
        parsed: (ctx, bytes) => void events.push(`parsed:${ctx.model}:${bytes}`),
        stepStarted: (step) => {
          events.push(`step:${step}`);
          return { ended: (_ms, err) => void events.push(`ended:${step}${err ? ':error' : ''}`) };
        },
        finished: (r) => {
          events.push(`finished:${r.path}`);
          results.push(r);
        },
      };
    },
  };
  return { observer, events, results };
}

const step = (type: string, run: () => unknown = () => undefined): Step => ({ type, execute: async () => run() as never });

describe('observer hooks', () => {
  test('a cascade reports start, parse, each step, and one finish with the facts', async () => {
    const { observer, events, results } = recorder();
    const decode: Step = { type: 'decode', execute: async (ctx) => void (ctx.decode = { headers: {} }) };
    const render: Step = { type: 'render', execute: async (ctx) => void (ctx.tokenIds = [1, 2, 3]) };
    const h = new PipelineHandler({ steps: [render, step('prefill'), decode], maxBodyBytes: 1024, log: silentLogger(), observer });
    const ex = h.begin({ method: 'POST', path: '/v1/completions?x=1', headers: {} })!;
    await ex.complete(Buffer.from('{"model":"m","prompt":"hi"}'));
    const answered = performance.now();
    // The answer leaves first: the request is reported one immediate later, and a late cancel
    // neither reports it twice nor changes how it ended.
    expect(events).not.toContain('finished:cascade');
    ex.abort('late cancel');
    await answerLeft();
    expect(events).toEqual([
      'start:POST /v1/completions',
      'parsed:m:27',
      'step:render',
      'ended:render',
      'step:prefill',
      'ended:prefill',
      'step:decode',
      'ended:decode',
      'finished:cascade',
    ]);
    expect(results[0]).toMatchObject({
      path: 'cascade',
      inputTokens: 3,
      stepsStarted: ['render', 'prefill', 'decode'],
      errorClass: undefined,
    });
    // Its duration ends when the answer was decided, not when the observer was told.
    expect(results[0]!.endedAt).toBeLessThanOrEqual(answered);
  });

  test('a failing step reports the error on its step and on the request, once', async () => {
    const { observer, events, results } = recorder();
    const h = new PipelineHandler({
      steps: [step('prefill', () => Promise.reject(new Error('x'))), step('decode')],
      maxBodyBytes: 1024,
      log: silentLogger(),
      observer,
    });
    await h.begin({ method: 'POST', path: '/v1/completions', headers: {} })!.complete(Buffer.from('{"prompt":"hi"}'));
    await answerLeft();
    expect(events.slice(-2)).toEqual(['ended:prefill:error', 'finished:error']);
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ path: 'error', status: 502, errorClass: 'internal', errorStep: 'prefill', inputTokens: null });
  });

  test('combineObservers fans out; with none it is the no-op observer', () => {
    expect(combineObservers([])).toBe(NOOP_PIPELINE_OBSERVER);
    const a = recorder();
    const b = recorder();
    const both = combineObservers([a.observer, b.observer]);
    both.decided('route');
    both
      .requestStarted({ method: 'POST', path: '/p', headers: {} })
      .stepStarted('s', {} as never)
      .ended(1);
    expect(a.events).toEqual(['decided:route', 'start:POST /p', 'step:s', 'ended:s']);
    expect(b.events).toEqual(a.events);
  });
});
