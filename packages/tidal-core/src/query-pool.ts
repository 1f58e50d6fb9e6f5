import { Piscina } from 'piscina';
import { InternalError, InvalidInputError, TidalError } from 'tidal-load';
import {
  CANCEL_CELLS,
  CELL_CANCELLED,
  WARM_SYNC_BYTES,
  WORKER_FILENAME,
  createMemoryBoard,
  processNativeGate,
  readMemoryBoard,
  runTask,
  unpackAnswer,
  type BatchEntryResult,
  type ResultOf,
  type RetrieveMessage,
  type SearchMessage,
  type SkippedResult,
  type TaskEnvelope,
  type TaskOf,
  type ThreadMemory,
  type WarmMessage,
  type WarmResult,
  type WorkerInit,
  type WorkerOp,
} from 'tidal-query';
import { Dropped, PRIORITY, QueryScheduler } from './scheduler.js';
import type { QueryRunner } from './query-front.js';

/** Messages a query worker holds at once (one running, the rest waiting in its message queue). */
const PIPELINE_DEPTH = 4;

/**
 * Messages the pool of `workers` query workers holds at once (workers × messages per worker), each
 * one query or a batch of up to {@link QUERY_BATCH}; everything else waits in the scheduler. A layer
 * in front of the database sizes itself from it (tidal-serve's adaptive floor).
 */
export function querySlots(workers: number): number {
  return workers * PIPELINE_DEPTH;
}

/**
 * Queries one message to a worker carries at most. Under load the queries that become ready
 * together (those that took the places of a batch just answered) leave in one message, so one
 * round trip through piscina (post, clone, the worker's wake-up, the answer) serves up to this many;
 * under light load a query still leaves alone, at once. Measured in docs/overload.md.
 */
export const QUERY_BATCH = 8;

/** Options of {@link QueryPool}. */
export interface QueryPoolOptions {
  /** Queries per message at most (1: one message per query). @default QUERY_BATCH */
  readonly batch?: number;
  /** The workers' entry module, when it wraps tidal-query's (see worker-host.ts). @default WORKER_FILENAME */
  readonly filename?: string;
  /**
   * Whether a worker's event loop runs between tasks. Piscina's default parks an idle worker in
   * `Atomics.wait`, which stops its event loop; a worker module (an HTTP acceptor) needs it to run.
   * @default false
   */
  readonly eventLoop?: boolean;
  /** Each worker's young generation cap in MiB (`resourceLimits.maxYoungGenerationSizeMb`); absent: V8's own. */
  readonly youngGenerationMb?: number;
}

type QueryMessage = RetrieveMessage | SearchMessage;

/** A query that left the scheduler and waits, for a few microseconds, to be posted in a batch. */
interface Forming {
  readonly msg: QueryMessage;
  readonly priority: number;
  readonly seq: number;
  readonly resolve: (r: BatchEntryResult) => void;
  readonly reject: (err: unknown) => void;
}

/** The largest `timeoutMs` a timer can hold (2^31 − 1 ms, about 24.8 days). */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** Cancellation of one query call: its validated `signal` and `timeoutMs`. */
export interface RunControl {
  readonly signal: AbortSignal | null;
  readonly timeoutMs: number | null;
  /** What the caller was doing, for the error message (`retrieve`, `search`). */
  readonly operation: string;
}

/** Validates a query's `signal` and `timeoutMs`. */
export function checkControl(signal: unknown, timeoutMs: unknown, operation: string): RunControl {
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new InvalidInputError('signal', 'an AbortSignal', signal);
  if (
    timeoutMs !== undefined &&
    (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TIMEOUT_MS)
  ) {
    throw new InvalidInputError('timeoutMs', `a whole number of milliseconds from 1 to ${MAX_TIMEOUT_MS}`, timeoutMs);
  }
  return { signal: signal ?? null, timeoutMs: timeoutMs ?? null, operation };
}

/** How one execution of a query waits for its worker (see {@link QueryPool.runQuery}). */
export interface QueueControl {
  /** {@link PRIORITY} of the queue. */
  readonly priority: number;
  /**
   * Aborting it gives the execution up: it leaves the queue if it waits there, and a worker that
   * has it but has not started it skips it. `null`: the execution cannot be given up.
   */
  readonly signal: AbortSignal | null;
  /** Asked when it reaches the head of the queue: `true` drops it unrun (see `SubmitOptions.expired` in scheduler.ts). */
  readonly expired?: () => boolean;
  /** Called with the envelope's clock when the execution leaves the queue. */
  readonly onDispatch?: (nowMs: number) => void;
}

/** A query's result with the clock it ran at (its envelope's `nowMs`, stamped when it was dispatched). */
export interface Executed<R> {
  readonly result: R;
  readonly nowMs: number;
}

/** A cell's value while its query may run (the worker skips one set to CELL_CANCELLED). */
const RUNNABLE = 0;

const SKIPPED: SkippedResult = Object.freeze({ skipped: true });

/** A worker's failure as the pool rejects with it: a `TidalError` as it is, anything else as `InternalError`. */
function asTidalError(err: unknown): TidalError {
  return TidalError.is(err) ? err : new InternalError(`query worker failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
}

type QueryOp = 'retrieve' | 'search';
/** What a query resolves with for its caller: a worker's skip only ever follows a cancellation. */
export type QueryResult<Op extends QueryOp> = Exclude<ResultOf<Op>, SkippedResult>;

/**
 * The query workers, behind one typed entry: `run(task)` and `runQuery(...)` post a task of the
 * worker protocol and resolve with that op's result type, or reject with a `TidalError` (a worker
 * that crashed is `InternalError`; piscina replaces the thread and later tasks run normally).
 *
 * Every task goes through a {@link QueryScheduler}: queries wait there by priority, the pool's own
 * tasks jump them, and piscina is given at most its pipeline depth (workers × tasks per worker).
 *
 * Cancellation without killing a thread: piscina aborts a running task by terminating its worker,
 * which would throw away the worker's catalog and ANN index. A query given up while it waits in
 * the scheduler simply leaves the queue. One already handed to a worker (in its pipeline) carries
 * a cell of a SharedArrayBuffer the workers map: giving it up sets the cell, and a worker that
 * picks the task up later sees the cell and skips it; one already running finishes. A cell is
 * reused only after the worker is done with its task.
 */
export class QueryPool implements QueryRunner {
  readonly #pool: Piscina;
  readonly #scheduler: QueryScheduler;
  readonly #cells: Int32Array;
  readonly #free: number[] = [];
  readonly #running = new Set<Promise<unknown>>();
  #skipped = 0;
  #posted = 0;
  readonly #workers: number;
  /** Where each worker publishes its memory figures (see {@link memory}). */
  readonly #memory: SharedArrayBuffer;
  readonly #batch: number;
  /** Messages piscina may hold at once: workers × PIPELINE_DEPTH. */
  readonly #slots: number;
  /** Messages posted and not answered yet (query batches and the pool's own tasks). */
  #messages = 0;
  /** Query batches posted so far. */
  #batches = 0;
  /** Queries inside the batches posted and not answered yet. */
  #inBatches = 0;
  /** The pool's own tasks started and not settled. */
  #control = 0;
  #forming: Forming[] = [];
  #formingSeq = 0;
  #flushQueued = false;

  constructor(init: Omit<WorkerInit, 'cancel'>, workers: number, options: QueryPoolOptions = {}) {
    const batch = options.batch ?? QUERY_BATCH;
    if (!Number.isInteger(batch) || batch < 1) throw new InvalidInputError('batch', 'a whole number ≥ 1', batch);
    this.#workers = workers;
    this.#batch = batch;
    this.#slots = querySlots(workers);
    this.#scheduler = new QueryScheduler({ depth: this.#slots * batch });
    const cancel = new SharedArrayBuffer(CANCEL_CELLS * 4);
    this.#cells = new Int32Array(cancel);
    for (let i = CANCEL_CELLS - 1; i >= 0; i--) this.#free.push(i);
    this.#memory = createMemoryBoard();
    const workerData: WorkerInit = { ...init, cancel, memory: this.#memory, nativeGate: processNativeGate() };
    this.#pool = new Piscina({
      filename: options.filename ?? WORKER_FILENAME,
      ...(options.eventLoop ? { atomics: 'async' as const } : {}),
      minThreads: workers,
      maxThreads: workers,
      // Workers hold the catalog and ANN index; an idle one must not be reaped and rebuilt.
      idleTimeout: 2 ** 31 - 1,
      // Tasks are pipelined: a worker holds up to this many, so it starts the next one the
      // moment it finishes instead of waiting for the main thread to answer its completion
      // message. Under overload the main thread is busiest exactly when that round trip
      // matters; without pipelining, measured goodput at 3× capacity fell to 55% of C.
      concurrentTasksPerWorker: PIPELINE_DEPTH,
      workerData,
      ...(options.youngGenerationMb !== undefined ? { resourceLimits: { maxYoungGenerationSizeMb: options.youngGenerationMb } } : {}),
    });
  }

  /** Query tasks a worker was handed but skipped because they were given up first: they never ran. */
  get skipped(): number {
    return this.#skipped;
  }

  /** Query tasks posted to a worker. */
  get posted(): number {
    return this.#posted;
  }

  /** Messages that carried queries to a worker (each one batch of up to `QUERY_BATCH`). */
  get batches(): number {
    return this.#batches;
  }

  /** Executions waiting in the scheduler for room in the pipeline. */
  get waiting(): number {
    return this.#scheduler.waiting;
  }

  /** Executions that left unrun: dropped from the scheduler, or skipped by a worker. */
  get dropped(): number {
    return this.#skipped + this.#scheduler.dropped;
  }

  /** The queue in front of the workers (its counters: waiting, running, dropped). */
  get scheduler(): QueryScheduler {
    return this.#scheduler;
  }

  /** Messages the pool's pipeline holds at most: workers × messages per worker. */
  get depth(): number {
    return this.#slots;
  }

  /** Runs a task to completion (no cancellation): warm, persist-ann, and tests' fault tasks. */
  run<Op extends WorkerOp>(task: TaskOf<Op>): Promise<ResultOf<Op>> {
    return this.#scheduler.submit(() => this.#post(task), { priority: PRIORITY.control, signal: null });
  }

  /**
   * Runs one execution of a query: it waits in the scheduler (by `control.priority`) until the
   * pipeline has room, then its envelope is stamped (`env()`, so its clock is the time it leaves
   * the queue, never earlier than any caller waiting on it) and it is posted. Rejects with
   * {@link Dropped} when it left the queue unrun (`control.signal` aborted, or `expired()` at the
   * head) and with the skip turned into `Dropped('aborted')` when a worker skipped it. Settles only
   * once no worker holds it any more.
   */
  runQuery<Op extends QueryOp>(
    op: Op,
    task: TaskOf<Op>['task'],
    env: () => TaskEnvelope,
    control: QueueControl,
  ): Promise<Executed<QueryResult<Op>>> {
    const { signal } = control;
    return this.#scheduler.submit(
      async () => {
        // Cells are taken at dispatch, so only the pipeline (workers × depth) ever holds one.
        const cell = signal === null ? -1 : (this.#free.pop() ?? -1);
        let onAbort: (() => void) | undefined;
        if (cell >= 0) {
          Atomics.store(this.#cells, cell, RUNNABLE);
          onAbort = () => Atomics.store(this.#cells, cell, CELL_CANCELLED);
          signal!.addEventListener('abort', onAbort, { once: true });
          if (signal!.aborted) onAbort();
        }
        const envelope = env();
        control.onDispatch?.(envelope.nowMs);
        this.#posted++;
        try {
          const r = await this.#enqueue({ op, env: envelope, task, cell } as TaskOf<Op>, control.priority);
          if ('skipped' in r) {
            if (signal?.aborted) throw new Dropped('aborted');
            throw new InternalError(`${op} was skipped by its worker without being cancelled`);
          }
          // The worker answers each query of a batch with its op's result (worker.ts, `batch`).
          return { result: r as QueryResult<Op>, nowMs: envelope.nowMs };
        } finally {
          if (onAbort !== undefined) signal!.removeEventListener('abort', onAbort);
          if (cell >= 0) this.#free.push(cell);
        }
      },
      control.expired === undefined
        ? { priority: control.priority, signal }
        : { priority: control.priority, signal, expired: control.expired },
    );
  }

  /**
   * The scheduler's depth follows the free message slots: an entry leaves the queue only when a
   * batch it can join will be posted, so what waits for a worker waits in the scheduler, by
   * priority, and never in a list of its own. Started entries beyond the ones in posted batches
   * and the pool's own tasks are those forming the next batches: at most `batch` per free slot.
   */
  #resize(): void {
    const free = Math.max(0, this.#slots - this.#messages);
    this.#scheduler.depth = this.#control + this.#inBatches + free * this.#batch;
  }

  #enqueue(msg: QueryMessage, priority: number): Promise<BatchEntryResult> {
    return new Promise((resolve, reject) => {
      this.#forming.push({ msg, priority, seq: this.#formingSeq++, resolve, reject });
      if (this.#flushQueued) return;
      this.#flushQueued = true;
      // After this turn of the event loop: every entry the scheduler starts in it (those that took
      // the places of an answered batch, or a burst of arrivals) joins the same batches.
      setImmediate(() => this.#flush());
    });
  }

  /** Posts the forming queries, highest priority first, spread over the free slots, `batch` a message at most. */
  #flush(): void {
    this.#flushQueued = false;
    const all = this.#forming;
    this.#forming = [];
    const ready: Forming[] = [];
    for (const f of all) {
      // Given up in the few microseconds since it left the queue: answered here, never posted.
      if (f.msg.cell >= 0 && Atomics.load(this.#cells, f.msg.cell) === CELL_CANCELLED) {
        this.#skipped++;
        f.resolve(SKIPPED);
      } else ready.push(f);
    }
    if (ready.length === 0) return;
    ready.sort((a, b) => b.priority - a.priority || a.seq - b.seq);
    const free = Math.max(1, this.#slots - this.#messages);
    const messages = Math.max(Math.ceil(ready.length / this.#batch), Math.min(ready.length, free));
    let at = 0;
    for (let m = 0; m < messages; m++) {
      const n = Math.ceil((ready.length - at) / (messages - m));
      this.#postBatch(ready.slice(at, at + n));
      at += n;
    }
    this.#resize();
  }

  #postBatch(entries: Forming[]): void {
    const n = entries.length;
    this.#messages++;
    this.#inBatches += n;
    this.#batches++;
    const done = () => {
      this.#messages--;
      this.#inBatches -= n;
    };
    const p = runTask(this.#pool, { op: 'batch', queries: entries.map((e) => e.msg) }).then(
      (results) => {
        done();
        for (let i = 0; i < n; i++) {
          const r = results[i];
          const e = entries[i]!;
          if (r === undefined) e.reject(new InternalError('a query worker answered a batch with too few results'));
          else if ('failed' in r) e.reject(asTidalError(r.failed));
          else {
            if ('skipped' in r) this.#skipped++;
            e.resolve(unpackAnswer(r));
          }
        }
        this.#resize();
      },
      (err: unknown) => {
        done();
        for (const e of entries) e.reject(asTidalError(err));
        this.#resize();
      },
    );
    this.#running.add(p);
    const forget = () => this.#running.delete(p);
    void p.then(forget, forget);
  }

  #post<Op extends WorkerOp>(task: TaskOf<Op>): Promise<ResultOf<Op>> {
    this.#control++;
    this.#messages++;
    this.#resize();
    const p = runTask<Op>(this.#pool, task).then(
      (r) => {
        if (typeof r === 'object' && r !== null && 'skipped' in r) this.#skipped++;
        return r;
      },
      (err: unknown) => {
        throw asTidalError(err);
      },
    );
    const settled = () => {
      this.#control--;
      this.#messages--;
      this.#resize();
    };
    void p.then(settled, settled);
    this.#running.add(p);
    const forget = () => this.#running.delete(p);
    void p.then(forget, forget);
    return p;
  }

  /**
   * Makes every worker load the items committed so far (catalog and ANN index), with one worker
   * elected through the warm tasks' shared barrier to build or load the ANN index for all.
   *
   * Piscina may hand two warm tasks to one worker (a worker still starting is skipped, and a
   * worker takes several tasks at once), so rounds continue until every thread has answered. Each
   * round is cheap once the index is built; the bound only guards against a pool that never starts
   * a thread.
   */
  async warm(env: TaskEnvelope, annBuild: WarmMessage['annBuild']): Promise<WarmResult[]> {
    const barrier = new SharedArrayBuffer(WARM_SYNC_BYTES);
    const byThread = new Map<number, WarmResult>();
    for (let round = 0; round < 20 && byThread.size < this.#workers; round++) {
      const runs: Promise<WarmResult>[] = [];
      for (let i = byThread.size; i < this.#workers; i++) runs.push(this.run({ op: 'warm', env, barrier, annBuild }));
      for (const r of await Promise.all(runs)) {
        // A thread that ran two tasks keeps the one that reports the election, if either does.
        if (!byThread.has(r.threadId) || r.annElected) byThread.set(r.threadId, r);
      }
      if (byThread.size < this.#workers) await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return [...byThread.values()];
  }

  /**
   * Has one worker save an ANN snapshot covering the committed items, if anything changed. It
   * costs about what applying the changes since the last snapshot costs, gives up past its budget
   * (the next open then applies them), and is not waited for beyond it. A failure only costs the
   * next open the changes since the last snapshot.
   */
  async persistAnn(env: TaskEnvelope, budgetMs = 30_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.run({ op: 'persist-ann', env, budgetMs }).catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, budgetMs + 10_000);
      }),
    ]);
    clearTimeout(timer);
  }

  /**
   * Each live worker's memory figures, as it last published them (at its last warm, then every
   * `MEMORY_PUBLISH_TASKS` queries): a worker that has not published yet is missing.
   */
  memory(): ThreadMemory[] {
    return readMemoryBoard(this.#memory, new Set(this.#pool.threads.map((t) => t.threadId)));
  }

  /** Waits for every task queued or posted so far, then stops the workers. */
  async destroy(): Promise<void> {
    await this.drain();
    await this.#pool.destroy();
  }

  /** Waits for every task queued or posted so far. */
  async drain(): Promise<void> {
    await this.#scheduler.onIdle();
    await Promise.allSettled([...this.#running]);
  }
}
