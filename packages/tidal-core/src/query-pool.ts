import { Piscina } from 'piscina';
import { AbortedError, InternalError, InvalidInputError, TidalError, TimeoutError } from 'tidal-load';
import {
  CANCEL_CELLS,
  CELL_CANCELLED,
  WARM_SYNC_BYTES,
  WORKER_FILENAME,
  runTask,
  type ResultOf,
  type SkippedResult,
  type TaskEnvelope,
  type TaskOf,
  type WarmResult,
  type WorkerInit,
  type WorkerOp,
} from 'tidal-query';

/** Tasks a query worker holds at once (one running, the rest waiting in its message queue). */
const PIPELINE_DEPTH = 4;

/** The largest `timeoutMs` a timer can hold (2^31 − 1 ms, about 24.8 days). */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** Cancellation of one run: validated `signal` and `timeoutMs` of a query. */
export interface RunControl {
  readonly signal: AbortSignal | null;
  readonly timeoutMs: number | null;
  /** What the caller was doing, for the error message (`retrieve`, `search`). */
  readonly operation: string;
  /** Called once the worker is done with the task (not when the caller stopped waiting). */
  readonly onSettled?: () => void;
}

/** Validates a query's `signal` and `timeoutMs`. */
export function checkControl(signal: unknown, timeoutMs: unknown, operation: string): RunControl {
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new InvalidInputError('signal', 'an AbortSignal', signal);
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TIMEOUT_MS)) {
    throw new InvalidInputError('timeoutMs', `a whole number of milliseconds from 1 to ${MAX_TIMEOUT_MS}`, timeoutMs);
  }
  return { signal: signal ?? null, timeoutMs: timeoutMs ?? null, operation };
}

/** A cell's value while its query may run (the worker skips one set to CELL_CANCELLED). */
const RUNNABLE = 0;

type QueryOp = 'retrieve' | 'search';
/** What a query resolves with for its caller: a worker's skip only ever follows a cancellation. */
type QueryResult<Op extends QueryOp> = Exclude<ResultOf<Op>, SkippedResult>;

/**
 * The query workers, behind one typed entry: `run(task, control)` posts a task of the worker
 * protocol and resolves with that op's result type, or rejects with a `TidalError` (a worker that
 * crashed is `InternalError`; piscina replaces the thread and later tasks run normally).
 *
 * Cancellation without killing a thread: piscina aborts a running task by terminating its worker,
 * which would throw away the worker's catalog and ANN index. Instead every cancellable task carries
 * a cell of a SharedArrayBuffer the workers map. Aborting (or timing out) sets the cell and
 * rejects the caller at once; a worker that picks the task up later sees the cell and skips it, so
 * a query cancelled while it waited never runs; one already running finishes and its result is
 * dropped. A cell is reused only after the worker is done with its task.
 */
export class QueryPool {
  readonly #pool: Piscina;
  readonly #cells: Int32Array;
  readonly #free: number[] = [];
  readonly #running = new Set<Promise<unknown>>();
  #skipped = 0;
  readonly #workers: number;

  constructor(init: Omit<WorkerInit, 'cancel'>, workers: number) {
    this.#workers = workers;
    const cancel = new SharedArrayBuffer(CANCEL_CELLS * 4);
    this.#cells = new Int32Array(cancel);
    for (let i = CANCEL_CELLS - 1; i >= 0; i--) this.#free.push(i);
    const workerData: WorkerInit = { ...init, cancel };
    this.#pool = new Piscina({
      filename: WORKER_FILENAME,
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
    });
  }

  /** Tasks cancelled before a worker started them, which therefore never ran. */
  get skipped(): number {
    return this.#skipped;
  }

  /** Runs a task to completion (no cancellation): warm, persist-ann, and tests' fault tasks. */
  run<Op extends WorkerOp>(task: TaskOf<Op>): Promise<ResultOf<Op>> {
    return this.#post(task);
  }

  /**
   * Runs a query task that the caller may abort or time out. Rejects with `AbortedError` or
   * `TimeoutError` at once when that happens; a signal already aborted posts nothing.
   * `control.onSettled` runs when the worker is done with the task, which may be after the caller
   * stopped waiting (a query already running finishes): the in-flight count must include it.
   */
  runQuery<Op extends QueryOp>(task: Omit<TaskOf<Op>, 'cell'>, control: RunControl): Promise<QueryResult<Op>> {
    const { signal, timeoutMs, operation, onSettled } = control;
    if (signal?.aborted) {
      onSettled?.();
      return Promise.reject(new AbortedError(operation, signal.reason));
    }
    const cancellable = signal !== null || timeoutMs !== null;
    // Out of cells (more cancellable queries in flight than CANCEL_CELLS): the query still
    // rejects on time, but a worker that picks it up runs it.
    const cell = cancellable ? (this.#free.pop() ?? -1) : -1;
    if (cell >= 0) Atomics.store(this.#cells, cell, RUNNABLE);
    const posted = this.#post<Op>({ ...task, cell } as TaskOf<Op>);
    const settled = () => {
      if (cell >= 0) this.#free.push(cell);
      onSettled?.();
    };
    void posted.then(settled, settled);
    const unwrap = (r: ResultOf<Op>): QueryResult<Op> => {
      if ('skipped' in r) throw new InternalError(`${operation} was skipped by its worker without being cancelled`);
      return r as QueryResult<Op>;
    };
    if (!cancellable) return posted.then(unwrap);
    return new Promise<QueryResult<Op>>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const cleanup = () => {
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const stop = (err: TidalError) => {
        if (cell >= 0) Atomics.store(this.#cells, cell, CELL_CANCELLED);
        cleanup();
        reject(err);
      };
      const onAbort = () => stop(new AbortedError(operation, signal!.reason));
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeoutMs !== null) timer = setTimeout(() => stop(new TimeoutError(operation, timeoutMs)), timeoutMs);
      posted.then(
        (r) => {
          cleanup();
          try {
            resolve(unwrap(r));
          } catch (err) {
            reject(err);
          }
        },
        (err: unknown) => {
          cleanup();
          reject(err);
        },
      );
    });
  }

  #post<Op extends WorkerOp>(task: TaskOf<Op>): Promise<ResultOf<Op>> {
    const p = runTask<Op>(this.#pool, task).then(
      (r) => {
        if (typeof r === 'object' && r !== null && 'skipped' in r) this.#skipped++;
        return r;
      },
      (err: unknown) => {
        throw TidalError.is(err) ? err : new InternalError(`query worker failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
      },
    );
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
  async warm(env: TaskEnvelope): Promise<WarmResult[]> {
    const barrier = new SharedArrayBuffer(WARM_SYNC_BYTES);
    const byThread = new Map<number, WarmResult>();
    for (let round = 0; round < 20 && byThread.size < this.#workers; round++) {
      const runs: Promise<WarmResult>[] = [];
      for (let i = byThread.size; i < this.#workers; i++) runs.push(this.run({ op: 'warm', env, barrier }));
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

  /** Waits for every task posted so far, then stops the workers. */
  async destroy(): Promise<void> {
    await Promise.allSettled([...this.#running]);
    await this.#pool.destroy();
  }

  /** Waits for every task posted so far. */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.#running]);
  }
}
