/**
 * The floor of a whole coordinator in Node, for the compare bench's `node` setup (both topologies):
 * the least a Node ext_proc service must do for one chat request of the bench's pipeline, with no
 * framework, no validation, no metrics, no logs and no error handling beyond failing the call.
 * - the ext_proc side is the budget's bare `node:http2` server (budget/bare-extproc.ts);
 * - per request: one JSON.parse of the client body; render (POST to the render worker, parse the
 *   answer); prefill through the gateway listener (one JSON.stringify, parse the answer for its
 *   kv_transfer_params); then the decode body, serialised once, forwarded with `epp-profile: decode`;
 * - side calls on undici pools kept alive, read whole on the dispatch API, as ours.
 * The legs carry what ours sends on the same pipeline (render -> prefill -> decode, kv-nixl,
 * use_openai_format): so its CPU per request, beside ours and Go's in the same run, is what Node
 * itself costs for this job, not our code.
 *
 * `node dist/bench/compare/bare-coordinator.js --port N --render URL --gateway URL`; prints
 * `listening <port>` once bound.
 */
import { Pool } from 'undici';
import { NIXL_PREFILL_PARAMS } from '../../src/connectors/kv/nixl';
import { startBareExtProc } from '../budget/bare-extproc';

type Json = Record<string, unknown>;

/**
 * One side call read whole on undici's dispatch API: the cheapest way through undici (no Readable,
 * no async iterator; our client does the same, src/gateway/collect.ts), so that the floor is one.
 */
function postJson(pool: Pool, path: string, headers: Record<string, string>, body: string): Promise<Json> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let status = 0;
    // undici's first handler interface, as ours (src/gateway/collect.ts): the newer one goes through
    // an adapter that parses every answer's headers and trailers into objects.
    pool.dispatch(
      { method: 'POST', path, headers, body },
      {
        onConnect: () => undefined,
        onHeaders: (statusCode) => ((status = statusCode), true),
        onData: (chunk) => (parts.push(chunk), true),
        onComplete: () => {
          if (status !== 200) reject(new Error(`${path}: HTTP ${status}`));
          else resolve(JSON.parse(Buffer.concat(parts).toString('utf8')) as Json);
        },
        onError: (err) => reject(err),
      },
    );
  });
}

function arg(argv: readonly string[], flag: string): string {
  const i = argv.indexOf(flag);
  const v = i >= 0 ? argv[i + 1] : undefined;
  if (!v) throw new Error(`${flag} is required: --port N --render URL --gateway URL`);
  return v;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const opts = { connections: 128, keepAliveTimeout: 60_000 };
  const render = new Pool(arg(argv, '--render'), opts);
  const gateway = new Pool(arg(argv, '--gateway'), opts);
  let seq = 0;
  const server = await startBareExtProc(Number(arg(argv, '--port')), async (raw) => {
    const id = `bare-${++seq}`;
    const req = JSON.parse(raw.toString('utf8')) as Json;
    const rendered = await postJson(render, '/v1/chat/completions/render', { 'content-type': 'application/json' }, JSON.stringify(req));
    const tokens = { token_ids: rendered['token_ids'] };
    const prefill: Json = { ...req, max_tokens: 1, stream: false, tokens, kv_transfer_params: NIXL_PREFILL_PARAMS };
    delete prefill['stream_options'];
    const prefilled = await postJson(
      gateway,
      '/v1/chat/completions',
      { 'content-type': 'application/json', 'x-request-id': id, 'epp-profile': 'prefill' },
      JSON.stringify(prefill),
    );
    const kv = { ...(prefilled['kv_transfer_params'] as Json | null), do_remote_decode: false, do_remote_prefill: true };
    return Buffer.from(JSON.stringify({ ...req, tokens, kv_transfer_params: kv }));
  });
  // A clean exit on SIGTERM, so that --cpu-prof (the bench's --cpu-prof DIR) writes its profile.
  process.once('SIGTERM', () => process.exit(0));
  process.stdout.write(`listening ${server.port}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
