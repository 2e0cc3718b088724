/**
 * `npm run bench -- budget`: CPU time per request of each layer of the service alone, beside the
 * floor that layer could reach in Node, in the same run and in interleaved rounds:
 * - transport: our ext_proc server (src/extproc: the lean Process call on grpc-js's listener) with
 *   a pipeline that does nothing, driven by real Envoy, against a bare node:http2 bidi server driven
 *   by the same Envoy (budget/bare-extproc.ts);
 * - pipeline: the real steps (render -> prefill -> decode, kv-nixl, metrics on) over in-memory side
 *   calls, against one JSON.parse + JSON.stringify per leg;
 * - side call: our pooled client against a local keep-alive server, against a bare undici request;
 * - whole: the service as it ships (dist/, the local stack: sim/ workers, envoy/'s bootstrap),
 *   against the sum of the floors (transport + pipeline + two side calls: render and prefill).
 * Child processes are measured from /proc (each thread's schedstat); in-process layers with
 * process.cpuUsage(). Writes bench/results/budget.json.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { Agent, Pool, request } from 'undici';
import { REPO_ROOT } from '../launch/envoy-bootstrap';
import { ensureEnvoy } from '../launch/envoy';
import { buildService, freeStackPorts, startLocalStack } from '../launch/local-stack';
import { freePort } from '../launch/ports';
import { startChild, type Child } from '../launch/supervise';
import { PooledSideCallClient } from '../src/gateway/client';
import { parseBenchArgs } from './args';
import { budgetEnvoyConfig } from './budget/envoy-config';
import { bareRequestOnce, pipelineFloorOnce, pipelineLayer, runPipelineOnce, sideCallOnce } from './budget/pipeline-layer';
import { cpuSeconds } from './compare/procs';
import { chatBody } from './compare/workload';
import { machineDescription, round3 } from './stats';

const INTS = {
  rounds: { flag: 'rounds', default: 3, min: 1, max: 50 },
  requests: { flag: 'requests', default: 2000, min: 10, max: 1_000_000, note: 'per layer, setup and round' },
  concurrency: { flag: 'concurrency', default: 8, min: 1, max: 256 },
  warmup: {
    flag: 'warmup',
    default: 15_000,
    min: 0,
    max: 1_000_000,
    note: 'per layer and setup, before the rounds: V8 goes on optimising a hot path for about 12,000 requests (README, compare)',
  },
  gracefulClose: {
    flag: 'graceful-close',
    default: 1,
    min: 0,
    max: 1,
    note: "Envoy's ext_proc_graceful_grpc_close in the transport layer",
  },
  whole: { flag: 'whole', default: 1, min: 0, max: 1, note: 'the whole service on the local stack; 0 = skip' },
} as const;

/** `n` calls of `once`, `concurrency` at a time. */
async function drive(n: number, concurrency: number, once: (i: number) => Promise<unknown>): Promise<void> {
  let issued = 0;
  const worker = async () => {
    while (issued < n) await once(issued++);
  };
  await Promise.all(Array.from({ length: Math.min(n, concurrency) }, worker));
}

/** CPU seconds of this process (all threads). */
const selfCpu = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

async function post(agent: Agent, url: string, body: string): Promise<void> {
  const r = await request(url, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body });
  const text = await r.body.text();
  if (r.statusCode !== 200) throw new Error(`${url}: HTTP ${r.statusCode} ${text.slice(0, 200)}`);
}

interface Measured {
  ms: number[];
}

async function main(): Promise<void> {
  const args = parseBenchArgs(process.argv.slice(2), 'budget', join(REPO_ROOT, 'bench', 'results', 'budget.json'), INTS);
  const say = (m: string) => process.stdout.write(`bench: ${m}\n`);
  process.setMaxListeners(32); // every child adds an exit hook (launch/supervise.ts)
  const dir = join(REPO_ROOT, '.cache', 'bench-budget');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const envoyBin = ensureEnvoy();
  buildService(say);
  const children: Child[] = [];
  const closers: Array<() => Promise<unknown>> = [];
  const started = new Date().toISOString();
  const load0 = loadavg().map((l) => round3(l));
  try {
    const child = async (name: string, script: string, extra: string[]) => {
      const c = await startChild({
        name,
        command: process.execPath,
        args: [join(REPO_ROOT, 'dist', 'bench', 'budget', script), ...extra],
        cwd: REPO_ROOT,
        logPath: join(dir, `${name}.log`),
        ready: /^listening \d+/,
      });
      children.push(c);
      return c;
    };
    const port = {
      ours: await freePort(),
      bare: await freePort(),
      lOurs: await freePort(),
      lBare: await freePort(),
      admin: await freePort(),
    };
    const ours = await child('extproc-ours', 'extproc-child.js', ['--kind', 'ours', '--port', String(port.ours)]);
    const bare = await child('extproc-bare', 'extproc-child.js', ['--kind', 'bare', '--port', String(port.bare)]);
    const keepalivePort = await freePort();
    const keepalive = await child('keepalive', 'keepalive-child.js', ['--port', String(keepalivePort), '--bytes', '1500']);
    const envoyConfig = join(dir, 'envoy.yaml');
    writeFileSync(
      envoyConfig,
      budgetEnvoyConfig({
        adminPort: port.admin,
        gracefulClose: args.gracefulClose === 1,
        listeners: [
          { name: 'ours', port: port.lOurs, extProcPort: port.ours },
          { name: 'bare', port: port.lBare, extProcPort: port.bare },
        ],
      }),
    );
    const envoy = await startChild({
      name: 'envoy',
      command: envoyBin,
      args: ['-c', envoyConfig, '--concurrency', '1', '--disable-hot-restart', '--log-level', 'info'],
      cwd: REPO_ROOT,
      logPath: join(dir, 'envoy.log'),
      ready: /starting main dispatch loop/,
    });
    children.push(envoy);
    const stack = args.whole === 1 ? await startLocalStackFor(dir, say, args.cpuProfileDir) : undefined;
    if (stack) closers.push(() => stack.stack.stop());
    const pipe = stack ? pipelineLayer({ gatewayUrl: stack.gatewayUrl, renderUrl: stack.renderUrl }) : undefined;
    if (pipe) closers.push(() => pipe.close());
    const agent = new Agent({ connections: 64, keepAliveTimeout: 30_000 });
    closers.push(() => agent.close());
    const client = new PooledSideCallClient(`http://127.0.0.1:${keepalivePort}`, { maxIdleConns: 64, idleTimeoutMs: 60_000 });
    closers.push(() => client.close());
    const pool = new Pool(`http://127.0.0.1:${keepalivePort}`, { connections: 64, keepAliveTimeout: 60_000 });
    closers.push(() => pool.close());

    const body = chatBody('sim-model', false);
    const bodyBuf = Buffer.from(body);
    const sideBody = body;
    const c = args.concurrency;
    const inProcess = (once: (i: number) => Promise<unknown>) => async (n: number) => {
      const t = selfCpu();
      await drive(n, c, once);
      return selfCpu() - t;
    };
    const viaPid = (pid: number, once: (i: number) => Promise<unknown>) => async (n: number) => {
      const t = cpuSeconds(pid);
      await drive(n, c, once);
      return cpuSeconds(pid) - t;
    };
    if (pipe) await runPipelineOnce(pipe.handler, bodyBuf, -1); // records the legs
    const legs = pipe?.recorded() ?? [];
    const blocks: Record<string, (n: number) => Promise<number>> = {
      transport: viaPid(ours.pid, () => post(agent, `http://127.0.0.1:${port.lOurs}/v1/chat/completions`, body)),
      transport_floor: viaPid(bare.pid, () => post(agent, `http://127.0.0.1:${port.lBare}/v1/chat/completions`, body)),
      side_call: inProcess(() => sideCallOnce(client, sideBody)),
      side_call_floor: inProcess(() => bareRequestOnce(pool, sideBody)),
      ...(stack && pipe
        ? {
            pipeline: inProcess((i) => runPipelineOnce(pipe.handler, bodyBuf, i)),
            pipeline_floor: inProcess(() => Promise.resolve(pipelineFloorOnce(bodyBuf, legs))),
            whole: viaPid(stack.coordinatorPid, () => post(agent, `${stack.publicUrl}/v1/chat/completions`, body)),
          }
        : {}),
    };
    const names = Object.keys(blocks);
    for (const name of names) if (args.warmup > 0) await blocks[name]!(args.warmup); // JIT, pools
    say(`warmed up: ${names.join(', ')}; keep-alive server pid ${keepalive.pid}`);
    const measured: Record<string, Measured> = Object.fromEntries(names.map((n) => [n, { ms: [] }]));
    for (let r = 0; r < args.rounds; r++) {
      for (let i = 0; i < names.length; i++) {
        // Each layer next to its floor, the pair's order alternating by round.
        const name = names[(i + (r % 2)) % names.length]!;
        const n = name === 'whole' ? Math.ceil(args.requests / 2) : args.requests;
        const cpu = await blocks[name]!(n);
        measured[name]!.ms.push(round3((cpu * 1000) / n));
      }
      say(`round ${r + 1}: ${names.map((n) => `${n} ${measured[n]!.ms.at(-1)}`).join(', ')} ms/req`);
    }
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const fig = Object.fromEntries(names.map((n) => [n, med(measured[n]!.ms)]));
    const layers = ['transport', 'pipeline', 'side_call'].filter((l) => fig[l] !== undefined);
    const table = layers.map((l) => ({
      layer: l,
      ours_ms: fig[l]!,
      floor_ms: fig[`${l}_floor`]!,
      ratio: round3(fig[l]! / fig[`${l}_floor`]!),
    }));
    const floorSum =
      fig['whole'] !== undefined ? round3(fig['transport_floor']! + fig['pipeline_floor']! + 2 * fig['side_call_floor']!) : null;
    const doc = {
      suite: 'budget',
      date: started,
      machine: machineDescription(['envoy 1.40.0 (--concurrency 1)']),
      load_average: { start: load0, end: loadavg().map((l) => round3(l)) },
      setup: {
        rounds: args.rounds,
        requests: args.requests,
        warmup: args.warmup,
        concurrency: c,
        graceful_close: args.gracefulClose === 1,
        request: `chat, ${body.length}-byte body`,
        cpu: 'median over rounds of CPU ms per request; children from /proc/<pid>/task/*/schedstat, in-process layers from process.cpuUsage()',
        note: 'pipeline side calls are answered from memory (recorded once from sim/ workers); the pipeline figure includes its in-memory side-call stand-in but no HTTP',
      },
      per_round_ms: Object.fromEntries(names.map((n) => [n, measured[n]!.ms])),
      layers: table,
      whole: fig['whole'] !== undefined ? { ours_ms: fig['whole'], sum_of_floors_ms: floorSum, side_calls_per_request: 2 } : null,
    };
    mkdirSync(join(args.out, '..'), { recursive: true });
    writeFileSync(args.out, `${JSON.stringify(doc, null, 2)}\n`);
    say(`wrote ${args.out}`);
    process.stdout.write(`\n| layer | ours ms/req | floor ms/req | ours / floor |\n|---|---|---|---|\n`);
    for (const t of table) process.stdout.write(`| ${t.layer} | ${t.ours_ms} | ${t.floor_ms} | ${t.ratio} |\n`);
    if (doc.whole)
      process.stdout.write(
        `| whole (2 side calls) | ${doc.whole.ours_ms} | ${floorSum} (sum of floors) | ${round3(doc.whole.ours_ms / floorSum!)} |\n`,
      );
  } finally {
    for (const close of closers.reverse()) await close().catch(() => undefined);
    for (const ch of children.reverse()) await ch.stop();
  }
}

async function startLocalStackFor(dir: string, say: (m: string) => void, cpuProfileDir?: string) {
  const ports = { ...(await freeStackPorts()), metrics: await freePort() };
  const stack = await startLocalStack({
    dir: join(dir, 'stack'),
    ports,
    bodyMode: 'full_duplex',
    kvConnector: 'kv-nixl',
    say,
    builtService: true,
    cpuProfileDir,
  });
  const pid = stack.pids.find((p) => p.name === 'epd-coordinator')!.pid;
  return {
    stack,
    gatewayUrl: stack.gatewayUrl,
    publicUrl: stack.publicUrl,
    renderUrl: `http://127.0.0.1:${ports.render}`,
    coordinatorPid: pid,
  };
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
