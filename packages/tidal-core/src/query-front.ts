import { performance } from 'node:perf_hooks';
import {
  checkCriticality,
  checkLevel,
  ClosedError,
  InternalError,
  LoadDetector,
  TidalError,
  type Criticality,
  type DegradationLevel,
  type InFlightGuard,
  type LoadView,
  type Thresholds,
} from 'tidal-load';
import type { TaskEnvelope, TaskOf } from 'tidal-query';
import { chooseLevel, type LevelReason } from './level-choice.js';
import { createMetrics, type Metrics, type MetricsRegistry } from './metrics.js';
import { checkControl, type Executed, type QueryResult, type QueueControl, type RunControl } from './query-pool.js';
import { PRIORITY } from './scheduler.js';
import { canonicalKey, type Answer, type WorkSharing } from './sharing.js';
import { QueryRecorder, type QueryStats } from './stats.js';
import type { QueryControl } from './types.js';
import type { QueryRecord } from './thread-db.js';

export interface QueryPlan {
  readonly control: RunControl;
  readonly criticality: Criticality;
  readonly level: DegradationLevel;
  readonly reason: LevelReason;
  readonly guard: InFlightGuard;
}

export /**
 * A rough size of a result's rows for the kept-results bound: the object, its id string and one
 * signal-values object per kind (≈ 200 bytes each: counts, windows, velocity, score).
 */
function estimateBytes(rows: readonly { id: string; signals: Record<string, unknown> }[]): number {
  let bytes = 256;
  for (const row of rows) {
    let kinds = 0;
    for (const _ in row.signals) kinds++;
    bytes += 160 + 2 * row.id.length + 200 * kinds;
  }
  return bytes;
}

/** `db.load`: the detector's figures through getters, so nothing that can change the count is reachable. */
function loadView(detector: LoadDetector): LoadView {
  return Object.freeze({
    get inFlight() {
      return detector.inFlight;
    },
    get level() {
      return detector.level;
    },
    get rejected() {
      return detector.rejected;
    },
    thresholds: detector.thresholds,
    admissionLimit: detector.admissionLimit,
  });
}

/**
 * Validates a query's control options and decides its level (see {@link chooseLevel}) from the
 * load at its entry, its deadline and the service times `recorder` measured, for a pool of
 * `workers` threads serving the queries in flight.
 */
export function planQuery(
  req: QueryControl,
  operation: string,
  guard: InFlightGuard,
  recorder: QueryRecorder,
  workers: number,
  loadManagement: boolean,
): QueryPlan {
  const control = checkControl(req.signal, req.timeoutMs, operation);
  const criticality = checkCriticality(req.criticality);
  const requested = req.level === undefined ? null : checkLevel(req.level);
  const { level, reason } = chooseLevel({
    loadLevel: guard.loadLevel,
    criticalityLevel: guard.level,
    requested,
    // The call started microseconds ago (validation): the whole budget remains.
    remainingMs: control.timeoutMs,
    queueMs: ((guard.inFlightAtEntry - 1) * recorder.meanServiceMs) / workers,
    serviceMs: (l) => recorder.serviceEstimateMs(l),
    loadManagement,
  });
  return { control, criticality, level, reason, guard };
}

/**
 * Where a front runs its admitted queries: the query pool on the database's thread (a scheduler in
 * front of piscina), this very thread in a worker module's (thread-runner.ts).
 */
export interface QueryRunner {
  /**
   * Runs one execution: it waits by `control.priority`, then its envelope is stamped (`env()`) and it
   * runs. Rejects with `Dropped` when it left unrun (`control.signal` aborted, or `expired()`).
   */
  runQuery<Op extends 'retrieve' | 'search'>(
    op: Op,
    task: TaskOf<Op>['task'],
    env: () => TaskEnvelope,
    control: QueueControl,
  ): Promise<Executed<QueryResult<Op>>>;
  /** Executions waiting to run. */
  readonly waiting: number;
  /** Executions that left unrun (dropped from the queue, or skipped by a worker). */
  readonly dropped: number;
}

export interface QueryFrontOptions {
  readonly thresholds: Readonly<Thresholds>;
  readonly admissionLimit: number;
  readonly workers: number;
  readonly loadManagement: boolean;
  readonly clock: () => number;
  /** The items version a query must see (every acknowledged item write). */
  readonly itemsVersion: () => number;
  /** The in-flight cell, when other threads count in it too (see LoadDetectorOptions.shared). */
  readonly inFlight?: SharedArrayBuffer;
  /** Told of every query served (a worker module's thread reports them to the database's thread). */
  readonly onServed?: (record: QueryRecord) => void;
}

/**
 * The query flow of a database between the facade and the executors, in whichever thread a read
 * arrives: admission (the load detector), the level a query runs at, work sharing, the runner, and
 * what is recorded of each query (latency, level, service time, failures, metrics). The facade (or
 * a worker module thread's handle) validates a request into a task and hands it here.
 */
export class QueryFront {
  readonly #detector: LoadDetector;
  readonly #recorder = new QueryRecorder();
  readonly #runner: QueryRunner;
  readonly #sharing: WorkSharing;
  readonly #onServed: ((record: QueryRecord) => void) | undefined;
  readonly #workers: number;
  readonly #loadManagement: boolean;
  readonly #clock: () => number;
  readonly #itemsVersion: () => number;
  readonly load: LoadView;
  #metrics: Metrics | null = null;

  constructor(runner: QueryRunner, sharing: WorkSharing, o: QueryFrontOptions) {
    this.#runner = runner;
    this.#sharing = sharing;
    this.#onServed = o.onServed;
    this.#workers = o.workers;
    this.#loadManagement = o.loadManagement;
    this.#clock = o.clock;
    this.#itemsVersion = o.itemsVersion;
    this.#detector = new LoadDetector({
      thresholds: o.thresholds,
      admissionLimit: o.admissionLimit,
      retryAfterMs: (inFlight) => this.retryAfterMs(inFlight),
      ...(o.inFlight ? { shared: o.inFlight } : {}),
    });
    this.load = loadView(this.#detector);
  }

  get recorder(): QueryRecorder {
    return this.#recorder;
  }

  /** Exports the figures to a prom-client registry (see createMetrics); returns what records them. */
  async exportMetrics(registry: MetricsRegistry): Promise<Metrics> {
    const load = this.load;
    const figures = { inFlight: () => load.inFlight, level: () => load.level, rejected: () => load.rejected };
    this.#metrics = await createMetrics(registry, figures);
    return this.#metrics;
  }

  /**
   * Admission first: one atomic add and a compare before any per-query work. A refusal is
   * returned, not thrown, so refusing costs no exception (it is the hot path under overload). The
   * criticality is peeked at unvalidated (a sheddable query is judged by a doubled count); it is
   * validated right after, with the rest of the request.
   */
  admit(req: QueryControl, operation: string, closing: boolean): InFlightGuard | TidalError {
    if (closing) return new ClosedError(operation);
    try {
      const sheddable = typeof req === 'object' && req !== null && req.criticality === 'sheddable';
      return this.#detector.tryEnter(sheddable ? 'sheddable' : 'default');
    } catch (err) {
      return TidalError.is(err) ? err : new InternalError(`${operation} failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    }
  }

  /** Validates a query's control options and decides its level (see {@link planQuery}). */
  plan(req: QueryControl, operation: string, guard: InFlightGuard): QueryPlan {
    return planQuery(req, operation, guard, this.#recorder, this.#workers, this.#loadManagement);
  }

  /**
   * Runs a validated query through work sharing and the scheduler, and records its latency,
   * level and service time (or its failure). The in-flight slot is released when the execution
   * the query waited on is done with its worker.
   */
  async run<Op extends 'retrieve' | 'search'>(
    op: Op,
    task: TaskOf<Op>['task'],
    plan: QueryPlan,
    shareable: boolean,
    bytes: (r: QueryResult<Op>) => number,
  ): Promise<Answer<QueryResult<Op>>> {
    const { control, level, guard } = plan;
    const itemsVersion = this.#itemsVersion();
    const staleMs = this.#sharing.stalenessMs(level);
    // Identity: the same op and validated task, at the same level and priority, against the same
    // items. The clock is not in it: an execution that has not left the queue is stamped when it
    // does, so it answers every caller as of a time after they arrived (see WorkSharing).
    const key = shareable ? `${op}|${level}|${plan.criticality}|${itemsVersion}|${canonicalKey(task)}` : null;
    const started = performance.now();
    const caller = { ...control, onSettled: () => guard[Symbol.dispose]() };
    let answer: Answer<QueryResult<Op>>;
    try {
      answer = await this.#sharing.run(
        key,
        level,
        itemsVersion,
        caller,
        (exec) =>
          this.#runner.runQuery(op, task, () => ({ level, nowMs: this.#clock(), itemsVersion: this.#itemsVersion(), staleMs }), {
            priority: PRIORITY[plan.criticality],
            signal: exec.signal,
            expired: exec.expired,
            onDispatch: exec.onDispatch,
          }),
        bytes,
      );
    } catch (err) {
      if (TidalError.is(err) && (err.code === 'TIDAL_ABORTED' || err.code === 'TIDAL_TIMEOUT')) {
        this.#recorder.cancelled++;
      } else {
        this.#recorder.failed++;
        this.#metrics?.failed();
      }
      throw err;
    }
    const latency = performance.now() - started;
    const serviceMs = answer.source === 'executed' ? answer.result.serviceMs : null;
    this.#recorder.record(level, latency, serviceMs);
    this.#onServed?.([op, level, latency, serviceMs]);
    if (answer.source === 'shared') this.#recorder.shared++;
    else if (answer.source === 'cached') this.#recorder.fromCache++;
    this.#metrics?.served(op, level, latency);
    return answer;
  }

  /**
   * Retry-After for a refused query: the time the queries in flight need to drain at the measured
   * service time, inFlight × meanServiceMs / workers, clamped to 1 ms – 10 s.
   */
  retryAfterMs(inFlight: number): number {
    const ms = Math.ceil((inFlight * this.#recorder.meanServiceMs) / this.#workers);
    return Math.min(10_000, Math.max(1, ms));
  }

  /**
   * Queries a worker module's thread answered itself (see thread-db.ts): recorded as this
   * thread's own, so `stats()` and the metrics count every query of the process.
   */
  recordFromThread(records: readonly QueryRecord[]): void {
    for (const [op, level, latency, serviceMs] of records) {
      this.#recorder.record(level, latency, serviceMs);
      this.#metrics?.served(op, level, latency);
    }
  }

  /** The query side of `stats()`. */
  stats(writes: QueryStats['writes'], cursors: QueryStats['cursors']): Omit<QueryStats, 'memory'> {
    return this.#recorder.snapshot(
      this.#detector.inFlight,
      this.#detector.level,
      this.#detector.rejected,
      this.#runner.dropped,
      this.#runner.waiting,
      writes,
      cursors,
    );
  }
}
