/**
 * The OpenAI SDK conformance suite (issue #19 item 1) against the real peers: the no-Kubernetes
 * topology of launch/epp-stack.ts with the real Envoy, the real llm-d EPP (file discovery) and
 * llm-d-inference-sim as render, encode, prefill and decode workers, the pipeline with the async
 * broker on a real Redis (sync requests only: llm-d-async is not needed). The cases are
 * test/support/openai-cases.ts, the same ones test/e2e/openai-sdk.test.ts runs against our sim/.
 *
 * What the workers received comes from their `--log-http` blocks; a failing prefill worker is
 * llm-d-inference-sim's own failure injection, turned on and off through its `/admin/config`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EPP_STACK_MODEL, freeEppStackPorts, startEppStack, type EppStack } from '../../launch/epp-stack';
import type { WorkerRole } from '../../launch/epp-topology';
import { defineOpenAiConformanceCases, type ConformanceTarget, type WorkerLeg } from '../support/openai-cases';
import { eventually, peerBin, peersSkipReason, simRequestsFor, type SimHttpRequest } from '../support/peers';

const skip = peersSkipReason(['epp', 'llm-d-inference-sim']);
const suite = skip ? describe.skip : describe;
const WORKERS: WorkerRole[] = ['encode', 'prefill', 'decode'];

/** llm-d-inference-sim's predefined failures (its `failure-types`), and a phrase of each one's message. */
const FAILURES = {
  'rate-limit': { type: 'rate_limit', text: 'Rate limit reached' },
  'server-error': { type: 'server_error', text: 'The server is overloaded' },
} as const;

const leg = (r: SimHttpRequest): WorkerLeg => ({ path: r.uri.split('?', 1)[0]!, headers: r.headers, json: r.json });

suite(`OpenAI SDK against the real peers (Envoy + llm-d EPP + llm-d-inference-sim)${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let dir: string;
  let stack: EppStack;
  let exited: string | undefined;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'epd-peers-sdk-'));
    stack = await startEppStack({
      dir,
      // With Redis: the pipeline has the async broker, whose /v1/models is what a client sees.
      ports: await freeEppStackPorts(WORKERS, true),
      eppBin: peerBin('epp'),
      simBin: peerBin('llm-d-inference-sim'),
      readyTimeoutMs: 90_000,
    });
    void stack.firstExit.then((name) => (exited ??= name));
  }, 180_000);

  afterAll(async () => {
    await stack?.stop();
    if (dir && !process.env['KEEP_STACK_DIR']) rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  const logs = (role?: WorkerRole): string[] =>
    stack.endpoints.filter((e) => role === undefined || e.role === role).map((e) => stack.logs[e.name]!);
  const adminConfig = async (role: WorkerRole, change: Record<string, unknown>): Promise<void> => {
    for (const e of stack.endpoints.filter((x) => x.role === role)) {
      const res = await fetch(`http://127.0.0.1:${e.port}/admin/config`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(change),
      });
      if (res.status !== 200) throw new Error(`${e.name} /admin/config answered ${res.status}: ${await res.text()}`);
      await res.arrayBuffer().catch(() => undefined);
    }
  };

  const target = (): ConformanceTarget => ({
    publicUrl: stack.publicUrl,
    model: EPP_STACK_MODEL,
    legs: async (role, id, atLeast) =>
      (
        await eventually(
          () => simRequestsFor(logs(role), id),
          (l) => l.length >= atLeast,
          `${atLeast} ${role} leg(s) of ${id}`,
          5000,
        )
      ).map(leg),
    anyLegs: async (id) => simRequestsFor(logs(), id).map(leg),
    failPrefill: async (kind) => {
      await adminConfig('prefill', { 'failure-injection-rate': 100, 'failure-types': [FAILURES[kind].type] });
      return {
        upstreamText: FAILURES[kind].text,
        restore: () => adminConfig('prefill', { 'failure-injection-rate': 0 }),
      };
    },
  });

  defineOpenAiConformanceCases(target, {
    // The EPP's OpenAI parser claims chat, completions, embeddings, responses, conversations, the
    // render routes and images; /tokenize is none of them (llm-d-router pkg/epp/handlers/parsers.go).
    tokenizeRefusedBy: {
      status: 400,
      says: 'no parser registered matching path suffix for: /tokenize',
      why: 'the llm-d EPP has no parser for it',
    },
  });

  it('no peer process exited during the run', () => {
    expect(exited).toBeUndefined();
  });
});
