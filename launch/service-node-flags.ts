/**
 * The node flags the service ships with (scripts/start.sh, the Dockerfile, the chart's
 * `nodeOptions`, config/k8s): V8's young generation capped at 8 MiB a semi-space (README,
 * Performance: memory). Benchmarks and the local stack run the built service with them, so that
 * what they measure is what operators run.
 */
export const SHIPPED_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=8'];
