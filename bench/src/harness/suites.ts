/** The named suites of `npm run bench -- --suite NAME`: each a script of bench/dist run in a process of its own. */

export interface Suite {
  readonly name: string;
  /** Relative to bench/dist. */
  readonly script: string;
  readonly description: string;
  /** Run with `--expose-gc`, so phases start from a full collection and heap figures are exact. */
  readonly gc: boolean;
  /** Scripts (relative to the repository root) run first; the suite does not start when one fails. */
  readonly before?: readonly string[];
}

export const SUITES: readonly Suite[] = Object.freeze([
  {
    name: 'query',
    script: 'bench.js',
    gc: true,
    description: 'ingest and queries against hand-written SQLite; recall@10 (the default suite)',
  },
  {
    name: 'write',
    script: 'write-path.js',
    gc: true,
    description: 'the durable write path against raw better-sqlite3; backpressure under 2× overload',
  },
  {
    name: 'store',
    script: 'signal-store.js',
    gc: true,
    description: 'the shared-memory signal state: reservation, memory per slot, growable against fixed',
  },
  {
    name: 'memory',
    script: 'tidal-memory.js',
    gc: true,
    description: "tidal's memory after the query suite's load, alone in a process: RSS split, per thread, per mapping",
  },
  { name: 'text', script: 'text-index.js', gc: true, description: 'the text index top-k BM25 against SQLite FTS5 on the same rows' },
  {
    name: 'retrieve',
    script: 'retrieve-levels.js',
    gc: true,
    description: 'retrieve per profile and degradation level: ns/query, work counters, overlap@10',
  },
  {
    name: 'cursor',
    script: 'cursor-chains.js',
    gc: false,
    description: 'what a cursor chain costs: a page alone, the first page of a chain, a later page',
  },
  {
    name: 'admission',
    script: 'admission.js',
    gc: true,
    description: 'what a refusal, the work-sharing key and the scheduler cost the main thread',
  },
  {
    name: 'ratelimit',
    script: 'ratelimit.js',
    gc: true,
    description: 'the (agent, session) rate limiter against rate-limiter-flexible; heap per session',
  },
  {
    name: 'overload',
    script: 'overload.js',
    gc: true,
    description: "each level's cost and quality, then 1×, 3×, 10× and 0.5× capacity, with and without load management",
  },
  {
    name: 'fleet',
    script: 'fleet.js',
    gc: false,
    before: ['scripts/ensure-services.mjs'],
    description: 'limits shared through Redis against local ones and rate-limiter-flexible; the embedder as a slow dependency',
  },
  {
    name: 'personalization',
    script: 'personalization.js',
    gc: true,
    description: 'for_you and related against hand-written SQL; per-level cost and quality',
  },
  {
    name: 'order',
    script: 'created-order.js',
    gc: true,
    description: 'the newest-first and per-creator orders after item writes, patched against rebuilt',
  },
  {
    name: 'replication',
    script: 'replication.js',
    gc: false,
    before: ['scripts/ensure-services.mjs'],
    description: 'replication through a Redis Stream: write throughput on against off, signals replicated per second, lag p50/p99',
  },
  {
    name: 'open',
    script: 'open-time.js',
    gc: false,
    description: 'open() to the first answered query, the first time (the ANN index built on its own thread) and on reopen',
  },
  {
    name: 'serve',
    script: 'serve/bench-serve.js',
    gc: false,
    description: 'tidal serve under open-loop 1×, 3×, 10×, 0.5× capacity over HTTP, load generator in its own process',
  },
]);

export function findSuite(name: string): Suite | undefined {
  return SUITES.find((s) => s.name === name);
}
