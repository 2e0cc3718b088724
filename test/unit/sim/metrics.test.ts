/** The sim's `/metrics`: the vLLM gauges the llm-d EPP scrapes to count an endpoint as ready. */
import { Simulator, startSimulator } from '../../../sim/simulator';

describe('simulator /metrics', () => {
  let sim: Simulator;
  beforeAll(async () => {
    sim = await startSimulator({ name: 'sim-metrics-0' });
  });
  afterAll(async () => sim?.close());

  it('answers GET with the idle vLLM gauges in Prometheus text, and refuses POST', async () => {
    const res = await fetch(`${sim.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await res.text();
    for (const m of ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc']) {
      expect(text).toMatch(new RegExp(`^${m} 0$`, 'm'));
    }
    const post = await fetch(`${sim.url}/metrics`, { method: 'POST', body: '{}' });
    expect(post.status).toBe(405);
    await post.arrayBuffer();
  });
});
