import { DegradationLevel, levelName, type DegradationLevelName } from 'tidal-load';
import type { GroupCommitStats } from 'tidal-wal';
import type { AnnBuildStats } from './ann-build.js';
import type { MemoryStats } from './memory-stats.js';
import type { PinnedRankingStats } from './pinned-rankings.js';
import type { ReplicaStats } from './replica-stats.js';

/** Latency samples kept for percentiles: the most recent ones, so the figures follow the load. */
const WINDOW = 8192;

export interface LatencySummary {
  /** Number of samples the percentiles are computed over (the most recent, at most 8192). */
  samples: number;
  p50: number;
  p99: number;
  p999: number;
}

export interface QueryStats {
  /** Queries in flight now. */
  inFlight: number;
  /** The level a query entering now would get. */
  level: DegradationLevelName;
  /** Queries served, per level they ran at, since open. */
  served: Record<DegradationLevelName, number>;
  /** Queries refused by the admission cap since open. */
  rejected: number;
  /** Failed queries (worker errors) since open; invalid input is not counted. */
  failed: number;
  /** Queries whose caller aborted them or whose `timeoutMs` passed, since open. */
  cancelled: number;
  /**
   * Executions given up before a worker started them (every caller waiting on them aborted or
   * timed out): they left the queue, or their worker skipped them. They never ran. A query whose
   * signal had already aborted when it was called is never queued and is counted in `cancelled` only.
   */
  cancelledBeforeRun: number;
  /** Queries answered by an identical query's execution (work sharing), since open. Counted in `served`. */
  shared: number;
  /** Queries answered by a kept result at most `maxStalenessMs` old, since open. Counted in `served`. */
  fromCache: number;
  /** Queries waiting in the scheduler for a worker now. */
  queued: number;
  /** End-to-end latency in ms (queueing included), over the most recent queries. */
  latencyMs: LatencySummary;
  /** Worker execution time in ms per level, over the most recent queries at that level. */
  serviceMs: Record<DegradationLevelName, LatencySummary>;
  /** Exponentially weighted mean worker execution time in ms (what Retry-After is computed from). */
  meanServiceMs: number;
  /** The write path: queue depth and its limit, refusals, the measured drain rate. */
  writes: GroupCommitStats & { queueLimit: number };
  /** Cursor chains: the pinned rankings kept now and their estimated bytes, and those dropped since open. */
  cursors: PinnedRankingStats;
  /** Replication (a database opened with a replication link), else null. */
  replication: ReplicaStats | null;
  /** The ANN index build on a thread of its own: its state and progress (see `warm()`). */
  annBuild: AnnBuildStats;
  /**
   * How the query workers answer vector searches, as their last warm left them: `'ann'` by the ANN
   * index, `'exact'` by comparing every item's int8 vector (the index is being built on a thread of
   * its own, or that build failed: the warm that follows a build switches them to `'ann'`),
   * `'none'` no item had an embedding.
   */
  vectorSearch: VectorSearchMode;
  /** Memory by component and per thread, measured from the buffers (see {@link MemoryStats}). */
  memory: MemoryStats;
}

/** See {@link QueryStats.vectorSearch}. */
export type VectorSearchMode = 'ann' | 'exact' | 'none';

class Ring {
  readonly #data = new Float64Array(WINDOW);
  #n = 0;

  push(v: number): void {
    this.#data[this.#n % WINDOW] = v;
    this.#n++;
  }

  summary(): LatencySummary {
    const len = Math.min(this.#n, WINDOW);
    if (len === 0) return { samples: 0, p50: 0, p99: 0, p999: 0 };
    const sorted = this.#data.slice(0, len).sort();
    const at = (q: number) => sorted[Math.min(len - 1, Math.floor(q * len))]!;
    return { samples: len, p50: at(0.5), p99: at(0.99), p999: at(0.999) };
  }
}

const LEVELS = [DegradationLevel.Full, DegradationLevel.ReducedCandidates, DegradationLevel.CoarseAggregates, DegradationLevel.NoDiversity];

/** Counters and latency windows behind `db.stats()` and the Prometheus metrics. */
export class QueryRecorder {
  readonly served: Float64Array = new Float64Array(LEVELS.length);
  failed = 0;
  cancelled = 0;
  readonly #latency = new Ring();
  readonly #service = LEVELS.map(() => new Ring());
  /** Starts at 1 ms until the first query reports. */
  meanServiceMs = 1;
  /** EWMA of the service time per level; NaN until that level has run. */
  readonly #levelServiceMs = new Float64Array(LEVELS.length).fill(Number.NaN);
  shared = 0;
  fromCache = 0;

  /**
   * Records a query served at `level`. `serviceMs` is its execution's worker time, or null when
   * it was answered by another query's execution or a kept result (no worker time of its own).
   */
  record(level: DegradationLevel, latencyMs: number, serviceMs: number | null): void {
    this.served[level]!++;
    this.#latency.push(latencyMs);
    if (serviceMs === null) return;
    this.#service[level]!.push(serviceMs);
    // EWMA with α = 1/16: follows a change in cost within a few dozen queries, ignores one outlier.
    this.meanServiceMs += (serviceMs - this.meanServiceMs) / 16;
    const prev = this.#levelServiceMs[level]!;
    this.#levelServiceMs[level] = Number.isNaN(prev) ? serviceMs : prev + (serviceMs - prev) / 16;
  }

  /**
   * The estimated worker time of one query at `level`, in ms: that level's EWMA; for a level that
   * has not run yet, the nearest better level's (a cheaper level is taken to cost no more), else
   * the overall mean.
   */
  serviceEstimateMs(level: DegradationLevel): number {
    for (let l: number = level; l >= 0; l--) {
      const v = this.#levelServiceMs[l]!;
      if (!Number.isNaN(v)) return v;
    }
    return this.meanServiceMs;
  }

  snapshot(
    inFlight: number,
    level: DegradationLevel,
    rejected: number,
    cancelledBeforeRun: number,
    queued: number,
    writes: QueryStats['writes'],
    cursors: PinnedRankingStats,
  ): Omit<QueryStats, 'memory'> {
    const served = {} as Record<DegradationLevelName, number>;
    const serviceMs = {} as Record<DegradationLevelName, LatencySummary>;
    for (const l of LEVELS) {
      served[levelName(l)] = this.served[l]!;
      serviceMs[levelName(l)] = this.#service[l]!.summary();
    }
    return {
      inFlight,
      level: levelName(level),
      served,
      rejected,
      failed: this.failed,
      cancelled: this.cancelled,
      cancelledBeforeRun,
      shared: this.shared,
      fromCache: this.fromCache,
      queued,
      latencyMs: this.#latency.summary(),
      serviceMs,
      meanServiceMs: this.meanServiceMs,
      writes,
      cursors,
      replication: null,
      annBuild: { state: 'idle', rowsDone: 0, rowsTotal: 0, elapsedMs: 0, vectors: 0, builds: 0, error: null, partial: false, rowsLeft: 0 },
      vectorSearch: 'none',
    };
  }
}
