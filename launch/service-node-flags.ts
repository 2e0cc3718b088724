/**
 * The node flags the service ships with (scripts/start.sh and the Dockerfile's entrypoint, which
 * the chart and config/k8s run), README, Performance: memory:
 * - V8's young generation capped at 4 MiB a semi-space;
 * - its old generation grown by half its live size between full collections;
 * - the memory reducer's collections (V8 runs them once the service goes quiet) without V8's
 *   reduce-memory mode. In that mode V8 let go of our optimised code: after one, `--trace-opt`
 *   showed about 110 functions compiled again in the next 300 requests, and the first few hundred
 *   requests after any quiet spell cost up to twice the CPU they cost once compiled again. The
 *   collection still runs and shrinks the heap; the young generation's freed pages stay pooled,
 *   which the smaller cap bounds;
 * - no allocation-site pretenuring. After a burst of concurrent requests (a warm-up at concurrency
 *   32 or more), V8 judged the request path's allocation sites long-lived and allocated their
 *   objects in the old generation from then on. Those objects die with their request, so only
 *   full collections reclaim them, and while they wait they keep the young objects they point to
 *   alive through two scavenges, into the old generation too. On the deploy stack at concurrency 8
 *   that was 9 to 16 full collections per 4,000 requests; without pretenuring, 1 or 2, and the
 *   service's CPU a request 0.66x Go's against 0.90x. Interleaved runs of concurrency 1, the 20 MB
 *   body and realistic workers found no case that pays for it (README, What was tried: the
 *   twenty-second and twenty-third rounds).
 * Node refuses all but the first in NODE_OPTIONS: the image's entrypoint carries them. Benchmarks
 * and the local stack run the built service with these flags, so that they measure what operators
 * run.
 */
export const SHIPPED_NODE_FLAGS: readonly string[] = [
  '--max-semi-space-size=4',
  '--heap-growing-percent=50',
  '--no-memory-reducer-favors-memory',
  '--no-allocation-site-pretenuring',
];
