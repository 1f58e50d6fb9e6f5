import type Database from 'better-sqlite3';
import { performance } from 'node:perf_hooks';
import { BackpressureError, ClosedError, InvalidInputError, TidalError, InternalError, WriterFailedError } from 'tidal-load';
import type { AckMark } from './ack-mark.js';
import { DrainRate, retryAfterMs } from './backpressure.js';
import type { MemoryGuard } from './memory-guard.js';

export interface GroupCommitOptions {
  /**
   * A batch closes when it holds this many events.
   * @default 1024
   */
  maxBatch?: number;
  /**
   * A batch closes this long after its first event arrived, if it has not filled up before.
   * @default 2
   */
  maxDelayMs?: number;
  /**
   * Backpressure threshold: while this many events (or more) wait to be committed, every write is
   * refused with `BackpressureError` before anything is enqueued. A call that is admitted is queued
   * whole, so the queue holds at most `maxQueueEvents − 1` plus the largest single call.
   * @default 16384
   */
  maxQueueEvents?: number;
}

/** The largest accepted `maxQueueEvents`: a queued event costs ~200 bytes, so 1 M is ~200 MB of heap. */
export const MAX_QUEUE_EVENTS_LIMIT = 1_000_000;

export const GROUP_COMMIT_DEFAULTS: Readonly<Required<GroupCommitOptions>> = Object.freeze({
  // 1024 events commit in ~1–2 ms on this class of machine (measured in bench/), so a full batch
  // never holds the event loop for long, while one transaction amortises SQLite's commit cost.
  maxBatch: 1024,
  // 2 ms adds at most 2 ms to a lone write's acknowledgement; under load batches fill before it.
  maxDelayMs: 2,
  // Little's law: queueing delay = depth / drain rate. The writer drains ~250 k signals/s on 2 cores
  // (`npm run bench:write`), so 16 384 queued events are ~65 ms of acknowledgement latency at the
  // threshold: enough to absorb a burst of 16 full batches, short enough that a refused caller is
  // told to wait milliseconds, not seconds. ~3 MB of queued objects at the bound.
  maxQueueEvents: 16_384,
});

/** `field` prefixes the names in errors: the option's path where the caller took it from. */
export function resolveGroupCommitOptions(options: GroupCommitOptions = {}, field = 'options'): Required<GroupCommitOptions> {
  const filled = { ...GROUP_COMMIT_DEFAULTS, ...stripUndefined(options) };
  if (!Number.isInteger(filled.maxBatch) || filled.maxBatch < 1 || filled.maxBatch > 100_000) {
    throw new InvalidInputError(`${field}.maxBatch`, 'a whole number from 1 to 100000', filled.maxBatch);
  }
  if (!Number.isInteger(filled.maxDelayMs) || filled.maxDelayMs < 0 || filled.maxDelayMs > 10_000) {
    throw new InvalidInputError(`${field}.maxDelayMs`, 'a whole number of milliseconds from 0 to 10000', filled.maxDelayMs);
  }
  // At least one full batch must fit under the threshold, or batches could only close by delay.
  if (
    !Number.isInteger(filled.maxQueueEvents) ||
    filled.maxQueueEvents < filled.maxBatch ||
    filled.maxQueueEvents > MAX_QUEUE_EVENTS_LIMIT
  ) {
    throw new InvalidInputError(
      `${field}.maxQueueEvents`,
      `a whole number from ${field}.maxBatch (${filled.maxBatch}) to ${MAX_QUEUE_EVENTS_LIMIT}`,
      filled.maxQueueEvents,
    );
  }
  return filled;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

export interface GroupCommitHooks<E> {
  /** Writes the batch; runs inside one SQLite transaction. `firstSeq` numbers `events[0]`. */
  commit(events: readonly E[], firstSeq: number): void;
  /** Runs after the transaction committed and before any promise resolves (apply to hot state). */
  afterCommit?(events: readonly E[], firstSeq: number): void;
}

/** What a GroupCommit consults besides its options; all optional. */
export interface GroupCommitDeps {
  /** Refuses writes when the host is short of memory (checked after backpressure). */
  memoryGuard?: MemoryGuard | null;
  /** Records the highest acknowledged sequence number after every batch. */
  ackMark?: AckMark | null;
  /** Monotonic milliseconds for the drain-rate measurement; tests inject a manual clock. */
  nowMs?: () => number;
  /** Called once when the writer fails closed (see {@link GroupCommit}). */
  onFailure?: (error: WriterFailedError) => void;
}

interface Pending<E> {
  events: readonly E[];
  resolve: (firstSeq: number) => void;
  reject: (err: unknown) => void;
}

export interface GroupCommitStats {
  committedEvents: number;
  committedBatches: number;
  /** Events waiting to be committed. */
  depth: number;
  /** Writes refused with `BackpressureError`. */
  refusedBackpressure: number;
  /** Writes refused with `MemoryPressureError`. */
  refusedMemory: number;
  /** The measured drain rate, events per millisecond. */
  drainPerMs: number;
}

/**
 * Group commit in front of the single writer connection: writes queue up, a batch closes at
 * `maxBatch` events or `maxDelayMs`, whichever first, and commits in one transaction; every promise
 * of the batch then resolves with its sequence number. A multi-event enqueue is never split across
 * batches, so it is committed whole or refused whole.
 *
 * {@link enqueue} is the single entry and decides admission before anything is queued: queue depth
 * at or over `maxQueueEvents` refuses with `BackpressureError` (with `retryAfterMs` from the
 * measured drain rate), then the memory guard, if any, may refuse with `MemoryPressureError`.
 *
 * A batch whose transaction fails (SQLite's disk full, an I/O error) rolls back whole and its
 * promises reject; the writer goes on. Code that runs after a commit (`afterCommit`, the ack mark)
 * cannot make the batch not durable, so if it throws the batch's promises still resolve, and the
 * writer *fails closed*: the queued writes and every later one are refused with
 * `WriterFailedError`, `onFailure` hears of it once, and nothing is thrown into the event loop.
 */
export class GroupCommit<E> {
  readonly #hooks: GroupCommitHooks<E>;
  readonly #options: Required<GroupCommitOptions>;
  readonly #runBatch: (events: readonly E[], firstSeq: number) => void;
  readonly #memoryGuard: MemoryGuard | null;
  readonly #ackMark: AckMark | null;
  readonly #nowMs: () => number;
  readonly #drain: DrainRate;
  /** Pending writes from `#head` on; taken slots are cleared so their events can be collected. */
  #queue: (Pending<E> | undefined)[] = [];
  #head = 0;
  #depth = 0;
  #nextSeq: number;
  #timer: NodeJS.Timeout | undefined;
  #immediate: NodeJS.Immediate | undefined;
  /** When the next batch became due (scheduled to run now), for the drain-rate sample. */
  #dueAt: number | undefined;
  #closed = false;
  #failure: WriterFailedError | null = null;
  readonly #onFailure: ((error: WriterFailedError) => void) | null;
  #committedEvents = 0;
  #committedBatches = 0;
  #refusedBackpressure = 0;
  #refusedMemory = 0;

  constructor(
    db: Database.Database,
    hooks: GroupCommitHooks<E>,
    lastSeq: number,
    options?: GroupCommitOptions,
    deps: GroupCommitDeps = {},
  ) {
    this.#hooks = hooks;
    this.#options = resolveGroupCommitOptions(options);
    this.#nextSeq = lastSeq + 1;
    this.#runBatch = db.transaction((events: readonly E[], firstSeq: number) => hooks.commit(events, firstSeq));
    this.#memoryGuard = deps.memoryGuard ?? null;
    this.#ackMark = deps.ackMark ?? null;
    this.#nowMs = deps.nowMs ?? (() => performance.now());
    this.#onFailure = deps.onFailure ?? null;
    // Until a batch is measured, assume one full batch per millisecond: optimistic on purpose, since
    // a too-short retry costs one more refusal while a too-long one leaves the writer idle.
    this.#drain = new DrainRate(this.#options.maxBatch);
  }

  /** Events waiting to be committed. */
  get depth(): number {
    return this.#depth;
  }

  /** The error every write is refused with since the writer failed closed, or null. */
  get failure(): WriterFailedError | null {
    return this.#failure;
  }

  /** The next sequence number to be handed out. */
  get nextSeq(): number {
    return this.#nextSeq;
  }

  get stats(): GroupCommitStats {
    return {
      committedEvents: this.#committedEvents,
      committedBatches: this.#committedBatches,
      depth: this.#depth,
      refusedBackpressure: this.#refusedBackpressure,
      refusedMemory: this.#refusedMemory,
      drainPerMs: this.#drain.perMs,
    };
  }

  get options(): Readonly<Required<GroupCommitOptions>> {
    return this.#options;
  }

  /** The `retryAfterMs` a write refused at the current depth would be given. */
  retryAfterMs(depth = this.#depth): number {
    return retryAfterMs(depth, this.#options.maxQueueEvents, this.#drain.perMs);
  }

  /**
   * Queues events to be committed together; resolves with the first event's sequence number once
   * they are durable. Admission is decided first, and `events` may be a function that builds the
   * events only once the write is admitted, so a refused write has no side effects at all.
   *
   * Rejects with {@link ClosedError} after {@link close}, `BackpressureError` when the queue depth
   * is at or over `maxQueueEvents`, `MemoryPressureError` when the memory guard refuses, or whatever
   * `events()` throws; in each case nothing was queued.
   */
  enqueue(events: readonly E[] | (() => readonly E[])): Promise<number> {
    let list: readonly E[];
    try {
      this.#admit();
      list = typeof events === 'function' ? events() : events;
    } catch (err) {
      return Promise.reject(err);
    }
    if (list.length === 0) return Promise.resolve(this.#nextSeq - 1);
    return new Promise<number>((resolve, reject) => {
      this.#queue.push({ events: list, resolve, reject });
      this.#depth += list.length;
      this.#schedule(list.length);
    });
  }

  #admit(): void {
    if (this.#closed) throw new ClosedError('write');
    if (this.#failure !== null) throw this.#failure;
    if (this.#depth >= this.#options.maxQueueEvents) {
      this.#refusedBackpressure++;
      throw new BackpressureError(this.#depth, this.#options.maxQueueEvents, this.retryAfterMs());
    }
    if (this.#memoryGuard !== null) {
      try {
        this.#memoryGuard.admit();
      } catch (err) {
        this.#refusedMemory++;
        throw err;
      }
    }
  }

  /**
   * The delay exists to gather writes from many callers into one transaction. A call that brings a
   * quarter of a batch or more has done that gathering itself: waiting `maxDelayMs` for company
   * would only add latency (measured: sequential 1 000-event calls ran at half the rate of
   * 1 024-event ones, each waiting out the 2 ms timer).
   */
  #schedule(arriving = 0): void {
    const now = this.#depth >= this.#options.maxBatch || this.#options.maxDelayMs === 0 || arriving * 4 >= this.#options.maxBatch;
    if (now) {
      if (this.#immediate === undefined) {
        this.#dueAt ??= this.#nowMs();
        this.#immediate = setImmediate(() => this.#onImmediate());
      }
    } else if (this.#timer === undefined) {
      this.#timer = setTimeout(() => this.#onTimer(), this.#options.maxDelayMs);
    }
  }

  #onImmediate(): void {
    this.#immediate = undefined;
    this.#commitOne();
    // One batch per turn of the event loop: reads and new writes get a turn between batches.
    if (this.#depth > 0) this.#schedule();
  }

  #onTimer(): void {
    this.#timer = undefined;
    this.#dueAt ??= this.#nowMs();
    this.#commitOne();
    if (this.#depth > 0) this.#schedule();
  }

  /** Commits one batch from the head of the queue, synchronously. */
  #commitOne(): void {
    if (this.#head >= this.#queue.length) {
      // A timer that fires after an immediate drained the queue: nothing was due.
      this.#dueAt = undefined;
      return;
    }
    const dueAt = this.#dueAt ?? this.#nowMs();
    this.#dueAt = undefined;
    const taken: Pending<E>[] = [];
    let count = 0;
    while (this.#head < this.#queue.length) {
      const next = this.#queue[this.#head]!;
      if (count > 0 && count + next.events.length > this.#options.maxBatch) break;
      taken.push(next);
      count += next.events.length;
      // Released now, not at the next compaction of the array: otherwise up to ~1000 taken writes,
      // and every event object in them, would stay reachable for nothing.
      this.#queue[this.#head] = undefined;
      this.#head++;
    }
    if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
    this.#depth -= count;
    // Not flatMap: it skips holes, and a batch numbered for `count` events while writing fewer
    // would record an acknowledged number the log never holds (a false tail loss on open).
    let events = taken[0]!.events;
    if (taken.length > 1) {
      const all: E[] = [];
      for (const p of taken) for (let i = 0; i < p.events.length; i++) all.push(p.events[i]!);
      events = all;
    }
    const firstSeq = this.#nextSeq;
    try {
      this.#runBatch(events, firstSeq);
    } catch (err) {
      const error = TidalError.is(err) ? err : new InternalError(`write batch failed: ${(err as Error).message}`, { cause: err });
      for (const p of taken) p.reject(error);
      return;
    }
    this.#nextSeq += count;
    this.#committedEvents += count;
    this.#committedBatches++;
    let failed: unknown = null;
    try {
      this.#ackMark?.write(this.#nextSeq - 1);
      this.#hooks.afterCommit?.(events, firstSeq);
    } catch (err) {
      failed = err;
    }
    const end = this.#nowMs();
    this.#drain.record(count, end - dueAt);
    // Still backlogged: the next batch is due now, so the gap until it finishes is drain time.
    if (this.#depth > 0) this.#dueAt = end;
    // Committed, so durable: acknowledged even if what follows the commit failed.
    let seq = firstSeq;
    for (const p of taken) {
      p.resolve(seq);
      seq += p.events.length;
    }
    if (failed !== null) this.#failClosed(failed);
  }

  /** Stops the writer: the queued writes are refused (none of them was written), and every later one. */
  #failClosed(cause: unknown): void {
    const error = new WriterFailedError(cause);
    this.#failure = error;
    this.#clearTimers();
    this.#dueAt = undefined;
    const queued = this.#queue.slice(this.#head);
    this.#queue = [];
    this.#head = 0;
    this.#depth = 0;
    for (const p of queued) p?.reject(error);
    try {
      this.#onFailure?.(error);
    } catch {
      // A failing sink must not turn a contained failure into an uncaught one.
    }
  }

  /** Commits everything queued now, synchronously, in as many batches as needed. */
  flushSync(): void {
    this.#clearTimers();
    while (this.#head < this.#queue.length) this.#commitOne();
    this.#dueAt = undefined;
  }

  /** Commits everything queued, then refuses new writes. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.flushSync();
    this.#closed = true;
  }

  #clearTimers(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#immediate !== undefined) clearImmediate(this.#immediate);
    this.#timer = undefined;
    this.#immediate = undefined;
  }
}
