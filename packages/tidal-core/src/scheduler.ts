import { performance } from 'node:perf_hooks';
import PQueue from 'p-queue';
import type { Criticality } from 'tidal-load';

/**
 * Queue priorities (p-queue runs the greatest first; equal priorities run in arrival order).
 * `control` is the pool's own work (warm, persist-ann, fault tasks), which must never wait behind
 * queries: warm runs at open and persist-ann after the queries drained, so it jumps nothing real.
 */
export const PRIORITY = Object.freeze({ control: 3, critical: 2, default: 1, sheddable: 0 } as const satisfies Record<
  Criticality | 'control',
  number
>);

/** Why an entry left the queue without running. */
export type DropReason = 'aborted' | 'expired';

/**
 * What an entry removed from the queue rejects with. Internal: the query layer answers its callers
 * with `AbortedError` or `TimeoutError`, never with this.
 */
export class Dropped extends Error {
  readonly reason: DropReason;

  constructor(reason: DropReason) {
    super(`the query left the queue without running (${reason})`);
    this.reason = reason;
  }
}

export interface SubmitOptions {
  /** {@link PRIORITY}: greater runs first. */
  priority: number;
  /** Aborting it removes the entry from the queue (it rejects with the signal's reason). */
  signal: AbortSignal | null;
  /**
   * Asked when the entry reaches the head of the queue: `true` drops it (it rejects with
   * `Dropped('expired')`) instead of running it. For deadlines whose timer has not fired yet
   * because the event loop was busy.
   */
  expired?: () => boolean;
}

export interface SchedulerOptions {
  /** Entries running at once: the worker pool's pipeline depth (workers × tasks per worker). */
  depth: number;
  /** Monotonic milliseconds, for deadlines; tests inject one. @default performance.now */
  now?: () => number;
}

/**
 * The queue between admission and the worker pool: admitted queries wait here, highest priority
 * first, and the pool is fed only up to its pipeline depth, so nothing waits in piscina's own FIFO
 * queue where a critical query could not overtake a sheddable one and an abandoned query could not
 * be removed. An entry whose signal aborts leaves the queue at once; one found expired when it
 * reaches the head is dropped without running.
 */
export class QueryScheduler {
  readonly #queue: PQueue;
  readonly now: () => number;
  #dispatched = 0;
  #dropped = 0;

  constructor(options: SchedulerOptions) {
    this.#queue = new PQueue({ concurrency: options.depth });
    this.now = options.now ?? (() => performance.now());
  }

  /** Entries started so far (handed to `start`). */
  get dispatched(): number {
    return this.#dispatched;
  }

  /** Entries that left the queue without running: aborted while waiting, or expired at its head. */
  get dropped(): number {
    return this.#dropped;
  }

  /** Entries that may run at once. */
  get depth(): number {
    return this.#queue.concurrency;
  }

  /**
   * Changes how many entries may run at once (at least 1). Raising it starts waiting entries at
   * once, synchronously, highest priority first; lowering it starts none until enough settle.
   */
  set depth(n: number) {
    this.#queue.concurrency = Math.max(1, n);
  }

  /** Entries waiting for a slot. */
  get waiting(): number {
    return this.#queue.size;
  }

  /** Entries running (started and not settled). */
  get running(): number {
    return this.#queue.pending;
  }

  /**
   * Runs `start` once a slot is free and every entry of greater priority (and every earlier one of
   * the same priority) has started. The slot is held until the promise `start` returns settles.
   */
  submit<T>(start: () => Promise<T>, options: SubmitOptions): Promise<T> {
    const { priority, signal, expired } = options;
    let started = false;
    const run = (): Promise<T> => {
      if (expired?.()) {
        this.#dropped++;
        return Promise.reject(new Dropped('expired'));
      }
      started = true;
      this.#dispatched++;
      return start();
    };
    if (signal === null) return this.#queue.add(run, { priority });
    if (signal.aborted) {
      this.#dropped++;
      return Promise.reject(new Dropped('aborted'));
    }
    // p-queue's own signal would also reject an entry aborted while it runs, freeing its slot while
    // a worker still holds the task: the queue is given a signal of its own, aborted only while the
    // entry waits.
    const queued = new AbortController();
    const onAbort = () => {
      if (started) return;
      this.#dropped++;
      queued.abort(new Dropped('aborted'));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    const p = this.#queue.add(run, { priority, signal: queued.signal });
    const cleanup = () => signal.removeEventListener('abort', onAbort);
    p.then(cleanup, cleanup);
    return p;
  }

  /** Resolves once no entry waits and none runs. */
  onIdle(): Promise<void> {
    return this.#queue.onIdle();
  }
}
