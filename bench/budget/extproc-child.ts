/**
 * A process the budget bench drives through Envoy, so that its CPU is its own:
 * `node dist/bench/budget/extproc-child.js --kind ours|bare --port N`.
 * - ours: our ext_proc server (src/extproc) with a pipeline that does nothing: every request is
 *   forwarded with one header set and its body unchanged (the messages a real forward sends);
 * - bare: the bare node:http2 floor (bare-extproc.ts).
 * Prints `listening <port>` once bound.
 */
import { createLogger } from '../../src/observability/logger';
import { startExtProcServer } from '../../src/extproc/server';
import type { Decision, Exchange, RequestHandler } from '../../src/pipeline/decision';
import { startBareExtProc } from './bare-extproc';

const MAX_BODY = 64 * 1024 * 1024;

/** The pipeline that does nothing: forward, one header, the body as it came. */
export const NULL_HANDLER: RequestHandler = {
  begin(): Exchange {
    return {
      maxBodyBytes: MAX_BODY,
      complete: (): Promise<Decision> =>
        Promise.resolve({ kind: 'forward', setHeaders: { 'epp-profile': 'decode' }, removeHeaders: [], body: null, metadata: {} }),
      tooLarge: (): Decision => ({ kind: 'respond', status: 413, headers: {}, body: Buffer.alloc(0), metadata: {} }),
      abort: () => undefined,
    };
  },
};

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const kind = argv[argv.indexOf('--kind') + 1];
  const port = Number(argv[argv.indexOf('--port') + 1] ?? 0);
  if (kind === 'bare') {
    const s = await startBareExtProc(port);
    process.stdout.write(`listening ${s.port}\n`);
    return;
  }
  if (kind !== 'ours') throw new Error('--kind ours|bare');
  const s = await startExtProcServer({
    address: `127.0.0.1:${port}`,
    handler: NULL_HANDLER,
    maxBodyBytes: MAX_BODY,
    metadataNamespace: 'epd.coordinator',
    fallbackBodyMode: 'full_duplex',
    log: createLogger(2),
  });
  process.stdout.write(`listening ${s.port}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
