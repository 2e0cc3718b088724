/**
 * A stand-in for the llm-d-async processor in the local stack: dequeues what the async-broker step
 * enqueued, dispatches it through Envoy's `async` listener, its own entry (without the mode header,
 * so it runs the whole pipeline; there the fairness id and objective it stamps are trusted), and
 * writes the result to the request's mailbox. Same contract as llm-d-async; see
 * launch/async-processor.ts. The real llm-d-async replaces it once its module can be installed.
 *
 *   node --import tsx scripts/async-processor.ts --redis-url redis://127.0.0.1:6380/0 \
 *     --igw http://127.0.0.1:8084 [--queue request-sortedset]
 */
import { TestAsyncProcessor } from '../launch/async-processor';

function arg(name: string, fallback?: string): string {
  const i = process.argv.indexOf(name);
  const v = i >= 0 ? process.argv[i + 1] : fallback;
  if (v === undefined) {
    process.stderr.write(`async-processor: ${name} is required\n`);
    process.exit(2);
  }
  return v;
}

const processor = new TestAsyncProcessor({
  redisUrl: arg('--redis-url'),
  queues: [{ queueName: arg('--queue', 'request-sortedset'), igwBaseUrl: arg('--igw'), requestPathUrl: '/v1/chat/completions' }],
});
processor.start();
process.stdout.write(`async-processor dispatching to ${arg('--igw')}\n`);
const stop = () => void processor.close().then(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
