/**
 * Facts about a finished request in the vocabulary of the upstream coordinator's metrics and spans,
 * shared by metrics and tracing.
 */
import type { ErrorClass } from '../pipeline/errors';

/** Our error classes in upstream's `error_code` vocabulary, plus `cancelled` (client gone). */
export function errorCode(errorClass: ErrorClass): string {
  switch (errorClass) {
    case 'bad_request':
    case 'payload_too_large':
      return 'bad_request';
    case 'transport':
      return 'upstream_transport';
    case 'upstream_4xx':
    case 'upstream_5xx':
    case 'cancelled':
    case 'internal':
      return errorClass;
    // Upstream counts an unusable answer or a failed image fetch as internal; our error_class
    // (access log, spans) tells them apart.
    case 'upstream_invalid':
    case 'media_unavailable':
      return 'internal';
  }
}

/** Upstream's rule: classified from the steps that started, only when a decode leg started. */
export function executionPath(stepsStarted: readonly string[], disaggregation?: string | null): string | undefined {
  const started = new Set(stepsStarted);
  // A prefill step that sent no prefill leg (selective disaggregation) did not disaggregate.
  if (disaggregation && disaggregation !== 'disaggregated') started.delete('prefill');
  const decode = started.has('decode') || started.has('conditional-decode') || started.has('prefill-decode');
  if (!decode) return undefined;
  const prefill = started.has('prefill') || started.has('prefill-decode');
  if (prefill && started.has('encode')) return 'encode-prefill-decode';
  return prefill ? 'prefill-decode' : 'decode-only';
}

/** The `route` label of upstream's per-route histograms. */
export function routeLabel(path: string): string {
  switch (path) {
    case '/v1/chat/completions':
      return 'chat_completions';
    case '/v1/completions':
      return 'completions';
    case '/inference/v1/generate':
      return 'generate';
    default:
      return 'unknown';
  }
}
