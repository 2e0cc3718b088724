/**
 * The OpenAI SDK conformance cases (issue #19 item 1), written once and run by two suites: against
 * our simulators behind the real Envoy (test/e2e/openai-sdk.test.ts) and against the real peers
 * (test/peers/openai-sdk.test.ts). The client is the official `openai` package with
 * `maxRetries: 0`, so that none of the SDK's own retries hides a failure.
 *
 * Each case checks what the SDK user sees (the parsed answer, the error class, its message, the
 * request id) and, where the target can tell, what the workers received.
 */
import { defineApiCases } from './openai-api-cases';
import { defineGenerationCases } from './openai-generation-cases';
import type { CaseOptions, ConformanceTarget } from './openai-target';

export type { CaseOptions, ConformanceTarget, PrefillFailure, WorkerLeg, WorkerRole } from './openai-target';

/** Defines the cases inside the caller's describe block; `target()` is read once its beforeAll ran. */
export function defineOpenAiConformanceCases(target: () => ConformanceTarget, opts: CaseOptions = {}): void {
  defineGenerationCases(target);
  defineApiCases(target, opts);
}
