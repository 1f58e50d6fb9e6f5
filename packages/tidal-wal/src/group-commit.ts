import type Database from 'better-sqlite3';
import { ClosedError, InvalidInputError, TidalError, InternalError } from 'tidal-load';

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
}

export const GROUP_COMMIT_DEFAULTS: Readonly<Required<GroupCommitOptions>> = Object.freeze({
  // 1024 events commit in ~1–2 ms on this class of machine (measured in bench/), so a full batch
  // never holds the event loop for long, while one transaction amortises SQLite's commit cost.
  maxBatch: 1024,
  // 2 ms adds at most 2 ms to a lone write's acknowledgement; under load batches fill before it.
  maxDelayMs: 2,
});

export function resolveGroupCommitOptions(options: GroupCommitOptions = {}): Required<GroupCommitOptions> {
  const filled = { ...GROUP_COMMIT_DEFAULTS, ...stripUndefined(options) };
  if (!Number.isInteger(filled.maxBatch) || filled.maxBatch < 1 || filled.maxBatch > 100_000) {
    throw new InvalidInputError('options.maxBatch', 'a whole number from 1 to 100000', filled.maxBatch);
  }
  if (!Number.isInteger(filled.maxDelayMs) || filled.maxDelayMs < 0 || filled.maxDelayMs > 10_000) {
    throw new InvalidInputError('options.maxDelayMs', 'a whole number of milliseconds from 0 to 10000', filled.maxDelayMs);
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

interface Pending<E> {
  events: readonly E[];
  resolve: (firstSeq: number) => void;
  reject: (err: unknown) => void;
}

/**
 * Group commit in front of the single writer connection: writes queue up, a batch closes at
 * `maxBatch` events or `maxDelayMs`, whichever first, and commits in one transaction; every promise
 * of the batch then resolves with its sequence number. A multi-event enqueue is never split across
 * batches, so it is committed whole or refused whole.
 */
export class GroupCommit<E> {
  readonly #db: Database.Database;
  readonly #hooks: GroupCommitHooks<E>;
  readonly #options: Required<GroupCommitOptions>;
  readonly #runBatch: (events: readonly E[], firstSeq: number) => void;
  #queue: Pending<E>[] = [];
  #head = 0;
  #depth = 0;
  #nextSeq: number;
  #timer: NodeJS.Timeout | undefined;
  #immediate: NodeJS.Immediate | undefined;
  #closed = false;
  #committedEvents = 0;
  #committedBatches = 0;

  constructor(db: Database.Database, hooks: GroupCommitHooks<E>, lastSeq: number, options?: GroupCommitOptions) {
    this.#db = db;
    this.#hooks = hooks;
    this.#options = resolveGroupCommitOptions(options);
    this.#nextSeq = lastSeq + 1;
    this.#runBatch = db.transaction((events: readonly E[], firstSeq: number) => hooks.commit(events, firstSeq));
  }

  /** Events waiting to be committed. */
  get depth(): number {
    return this.#depth;
  }

  /** The next sequence number to be handed out. */
  get nextSeq(): number {
    return this.#nextSeq;
  }

  get stats(): { committedEvents: number; committedBatches: number; depth: number } {
    return { committedEvents: this.#committedEvents, committedBatches: this.#committedBatches, depth: this.#depth };
  }

  get options(): Readonly<Required<GroupCommitOptions>> {
    return this.#options;
  }

  /**
   * Queues events to be committed together; resolves with the first event's sequence number once
   * they are durable. Throws {@link ClosedError} after {@link close}.
   */
  enqueue(events: readonly E[]): Promise<number> {
    if (this.#closed) return Promise.reject(new ClosedError('write'));
    if (events.length === 0) return Promise.resolve(this.#nextSeq - 1);
    return new Promise<number>((resolve, reject) => {
      this.#queue.push({ events, resolve, reject });
      this.#depth += events.length;
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#depth >= this.#options.maxBatch || this.#options.maxDelayMs === 0) {
      if (this.#immediate === undefined) this.#immediate = setImmediate(() => this.#onImmediate());
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
    this.#commitOne();
    if (this.#depth > 0) this.#schedule();
  }

  /** Commits one batch from the head of the queue, synchronously. */
  #commitOne(): void {
    if (this.#head >= this.#queue.length) return;
    const taken: Pending<E>[] = [];
    let count = 0;
    while (this.#head < this.#queue.length) {
      const next = this.#queue[this.#head]!;
      if (count > 0 && count + next.events.length > this.#options.maxBatch) break;
      taken.push(next);
      count += next.events.length;
      this.#head++;
    }
    if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
    this.#depth -= count;
    const events = taken.length === 1 ? taken[0]!.events : taken.flatMap((p) => p.events);
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
    try {
      this.#hooks.afterCommit?.(events, firstSeq);
    } finally {
      let seq = firstSeq;
      for (const p of taken) {
        p.resolve(seq);
        seq += p.events.length;
      }
    }
  }

  /** Commits everything queued now, synchronously, in as many batches as needed. */
  flushSync(): void {
    this.#clearTimers();
    while (this.#head < this.#queue.length) this.#commitOne();
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
