/**
 * The node flags the service ships with (scripts/start.sh, the Dockerfile, the chart's
 * `nodeOptions`, config/k8s): V8's young generation capped at 8 MiB a semi-space, and its old
 * generation grown by half its live size between full collections (README, Performance: memory).
 * Node refuses `--heap-growing-percent` in NODE_OPTIONS: the image's entrypoint carries it. Benchmarks
 * and the local stack run the built service with these flags, so that they measure what operators run.
 */
export const SHIPPED_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=8', '--heap-growing-percent=50'];
