import { AbortedError, type DegradationLevel, InvalidInputError, TimeoutError } from 'tidal-load';
import type { Executed } from './query-pool.js';
import { Dropped } from './scheduler.js';
import { isPlainObject } from './validate.js';

/** Work sharing between identical queries (see {@link WorkSharing}). */
export interface WorkSharingOptions {
  /**
   * How old, in milliseconds of the database clock, a result may be when it answers an identical
   * query at CoarseAggregates and NoDiversity. `0` shares only executions that have not started
   * (whose answer is as fresh as a new one). Full and ReducedCandidates always have 0. Whole
   * numbers from 0 to 60 000.
   * @default { coarseAggregates: 250, noDiversity: 1000 }
   */
  maxStalenessMs?: { coarseAggregates?: number; noDiversity?: number };
  /**
   * Results kept for reuse at most (the oldest goes first).
   * @default 1024
   */
  maxEntries?: number;
  /**
   * Estimated bytes of the results kept for reuse at most (the oldest goes first).
   * @default 16 MiB
   */
  maxBytes?: number;
}

export interface FilledWorkSharing {
  /** Per level, indexed by DegradationLevel. */
  readonly maxStalenessMs: readonly number[];
  readonly maxEntries: number;
  readonly maxBytes: number;
}

/**
 * CoarseAggregates already answers with all-time counts for windowed reads and 24h velocity for a
 * 1h window: it is coarse by hours, and 250 ms more is far inside that (signal half-lives are hours
 * too). NoDiversity is the last level before refusal, where every execution saved serves another
 * query: at the measured ≈ 830 queries/s on 2 workers, a 1 s window lets a query repeated a few
 * times a second run once a second. 1024 entries of the default 20 items (≈ 5–15 KiB each) stay
 * under the 16 MiB bound.
 */
export const WORK_SHARING_DEFAULTS = Object.freeze({
  maxStalenessMs: Object.freeze({ coarseAggregates: 250, noDiversity: 1000 }),
  maxEntries: 1024,
  maxBytes: 16 * 1024 * 1024,
});

const MAX_STALENESS_MS = 60_000;

function whole(field: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidInputError(field, `a whole number from ${min} to ${max}`, value);
  }
  return value;
}

/** Validates the `workSharing` option (key checks are done by the options' resolve step). */
export function resolveWorkSharing(value: WorkSharingOptions | undefined): FilledWorkSharing {
  const o = value ?? {};
  const stale: unknown = o.maxStalenessMs;
  if (stale !== undefined) {
    if (!isPlainObject(stale))
      throw new InvalidInputError('workSharing.maxStalenessMs', 'an object with coarseAggregates, noDiversity', stale);
    for (const k of Object.keys(stale)) {
      if (k !== 'coarseAggregates' && k !== 'noDiversity') {
        throw new InvalidInputError(
          `workSharing.maxStalenessMs.${k}`,
          'absent: only coarseAggregates and noDiversity serve older results (Full and ReducedCandidates are always 0)',
          stale[k],
        );
      }
    }
  }
  const d = WORK_SHARING_DEFAULTS;
  const coarse = whole(
    'workSharing.maxStalenessMs.coarseAggregates',
    o.maxStalenessMs?.coarseAggregates,
    d.maxStalenessMs.coarseAggregates,
    0,
    MAX_STALENESS_MS,
  );
  const noDiv = whole(
    'workSharing.maxStalenessMs.noDiversity',
    o.maxStalenessMs?.noDiversity,
    d.maxStalenessMs.noDiversity,
    0,
    MAX_STALENESS_MS,
  );
  return Object.freeze({
    maxStalenessMs: Object.freeze([0, 0, coarse, noDiv]),
    maxEntries: whole('workSharing.maxEntries', o.maxEntries, d.maxEntries, 0, 2 ** 20),
    maxBytes: whole('workSharing.maxBytes', o.maxBytes, d.maxBytes, 0, 2 ** 40),
  });
}

/**
 * A canonical string for a validated task: object keys sorted, vectors as the base64 of their
 * Float32 bytes (exact: two vectors share a key only when every component is the same float).
 * Equal keys mean equal tasks; some equal tasks (an `in` list in another order) get different keys,
 * which only costs a missed share.
 */
export function canonicalKey(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (value instanceof Float32Array) return `f32:${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64')}`;
  if (value instanceof Int32Array) return `i32:${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64')}`;
  if (Array.isArray(value)) return `[${value.map(canonicalKey).join(',')}]`;
  const o = value as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalKey(o[k])}`)
    .join(',')}}`;
}

/** One call waiting on an execution. */
export interface Caller {
  readonly signal: AbortSignal | null;
  readonly timeoutMs: number | null;
  /** What the caller was doing, for the error message (`retrieve`, `search`). */
  readonly operation: string;
  /**
   * Called once the execution the call waits on is done with its worker (or left the queue
   * unrun), even when the caller stopped waiting earlier: a query given up while running still
   * occupies its worker, so it still counts as load. Called at once for an answer from the cache.
   */
  readonly onSettled: () => void;
}

/** How a call was answered: by its own execution, by one it joined, or by a kept result. */
export type AnswerSource = 'executed' | 'shared' | 'cached';

export interface Answer<R> {
  readonly result: R;
  /** How much older than the call the result's clock is, in ms (0 when it ran after the call arrived). */
  readonly ageMs: number;
  readonly source: AnswerSource;
}

/** What an execution is given to wait for its worker with (see {@link QueueControl}). */
export interface ExecutionControl {
  readonly signal: AbortSignal | null;
  readonly expired: () => boolean;
  /** Called with the clock its envelope was stamped with, when it leaves the queue. */
  readonly onDispatch: (nowMs: number) => void;
}

class Execution<R> {
  readonly controller: AbortController | null;
  promise!: Promise<Executed<R>>;
  waiting = 0;
  /** The latest deadline (monotonic ms) of its callers; Infinity once one has none. */
  deadline = -Infinity;
  /** The clock it was stamped with, once dispatched. */
  nowMs: number | null = null;
  settled = false;

  constructor(cancellable: boolean) {
    this.controller = cancellable ? new AbortController() : null;
  }

  get abandoned(): boolean {
    return this.controller?.signal.aborted ?? false;
  }
}

interface Kept {
  readonly result: unknown;
  readonly nowMs: number;
  readonly bytes: number;
}

/**
 * Identical queries share work. A query whose key (its validated task, level and items version,
 * see db.ts) matches an execution that has not left the queue yet joins it: that execution is
 * stamped with the clock when it leaves the queue, so its answer is as fresh as the joiner's own
 * would be, and read-your-writes holds. At CoarseAggregates and NoDiversity a query may also be
 * answered by an execution already running, or by a kept result, whose clock is at most
 * `maxStalenessMs` older than the call: coarse means coarse in time too (signals of the last
 * `maxStalenessMs` may be missing). Kept results are bounded by entries and estimated bytes, and
 * dropped when the items change.
 *
 * Each caller keeps its own cancellation: aborting or timing out rejects that caller at once; the
 * execution is given up (it leaves the queue, or its worker skips it) only when no caller waits.
 */
export class WorkSharing {
  readonly #o: FilledWorkSharing;
  readonly #clock: () => number;
  readonly #now: () => number;
  readonly #inFlight = new Map<string, Execution<unknown>>();
  /** In insertion order, which is the eviction order. */
  readonly #kept = new Map<string, Kept>();
  #keptBytes = 0;
  #keptVersion = -1;

  /**
   * @param clock the database clock (ages are measured in it, like the envelope's `nowMs`)
   * @param now monotonic ms, for deadlines
   */
  constructor(options: FilledWorkSharing, clock: () => number, now: () => number) {
    this.#o = options;
    this.#clock = clock;
    this.#now = now;
  }

  /** How old a kept result may be at `level` (`maxStalenessMs`; 0 at Full and ReducedCandidates). */
  stalenessMs(level: DegradationLevel): number {
    return this.#o.maxStalenessMs[level] ?? 0;
  }

  /** Results kept for reuse now, and their estimated bytes. */
  get kept(): { entries: number; bytes: number } {
    return { entries: this.#kept.size, bytes: this.#keptBytes };
  }

  /**
   * Answers one call: from a kept result, by joining an identical execution, or by starting one
   * with `execute`. `key` null: the query is never shared (an agent session's, whose exclusions
   * are its own). `bytes` estimates a result's size, for the cache bound.
   */
  run<R>(
    key: string | null,
    level: DegradationLevel,
    itemsVersion: number,
    caller: Caller,
    execute: (control: ExecutionControl) => Promise<Executed<R>>,
    bytes: (result: R) => number,
  ): Promise<Answer<R>> {
    if (caller.signal?.aborted) {
      caller.onSettled();
      return Promise.reject(new AbortedError(caller.operation, caller.signal.reason));
    }
    const maxStale = this.#o.maxStalenessMs[level] ?? 0;
    if (key !== null) {
      const arrival = this.#clock();
      if (maxStale > 0) {
        const kept = this.#lookup(key, itemsVersion, arrival, maxStale);
        if (kept !== undefined) {
          caller.onSettled();
          return Promise.resolve({ result: kept.result as R, ageMs: arrival - kept.nowMs, source: 'cached' });
        }
      }
      const running = this.#inFlight.get(key) as Execution<R> | undefined;
      if (
        running !== undefined &&
        !running.abandoned &&
        (running.nowMs === null || (maxStale > 0 && arrival - running.nowMs <= maxStale))
      ) {
        return this.#join(running, caller, 'shared', arrival);
      }
    }
    const exec = new Execution<R>(caller.signal !== null || caller.timeoutMs !== null);
    // Set before `execute`: the scheduler may start it (and ask whether it expired) synchronously.
    exec.deadline = caller.timeoutMs === null ? Infinity : this.#now() + caller.timeoutMs;
    exec.promise = execute({
      signal: exec.controller?.signal ?? null,
      expired: () => this.#now() >= exec.deadline,
      onDispatch: (nowMs) => {
        exec.nowMs = nowMs;
      },
    });
    const done = () => {
      exec.settled = true;
      if (key !== null && this.#inFlight.get(key) === exec) this.#inFlight.delete(key);
    };
    exec.promise.then((r) => {
      done();
      if (key !== null && maxStale > 0) this.#keep(key, itemsVersion, r.result, r.nowMs, bytes(r.result) + key.length * 2);
    }, done);
    if (key !== null) this.#inFlight.set(key, exec);
    return this.#join(exec, caller, 'executed', null);
  }

  #join<R>(exec: Execution<R>, caller: Caller, source: AnswerSource, arrival: number | null): Promise<Answer<R>> {
    const { signal, timeoutMs, operation } = caller;
    exec.waiting++;
    const deadline = timeoutMs === null ? Infinity : this.#now() + timeoutMs;
    if (deadline > exec.deadline) exec.deadline = deadline;
    void exec.promise.then(caller.onSettled, caller.onSettled);
    return new Promise<Answer<R>>((resolve, reject) => {
      let left = false;
      let timer: NodeJS.Timeout | undefined;
      const finish = (): boolean => {
        if (left) return false;
        left = true;
        exec.waiting--;
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        return true;
      };
      const leave = (err: Error) => {
        if (!finish()) return;
        reject(err);
        // The last caller gone: the execution leaves the queue, or its worker skips it.
        if (exec.waiting === 0 && !exec.settled) exec.controller?.abort(new Dropped('aborted'));
      };
      const onAbort = () => leave(new AbortedError(operation, signal!.reason));
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeoutMs !== null) timer = setTimeout(() => leave(new TimeoutError(operation, timeoutMs)), timeoutMs);
      exec.promise.then(
        (r) => {
          if (!finish()) return;
          resolve({ result: r.result, ageMs: arrival === null ? 0 : Math.max(0, arrival - r.nowMs), source });
        },
        (err: unknown) => {
          if (!finish()) return;
          if (err instanceof Dropped) {
            // Expired at the head of the queue before this caller's timer fired.
            reject(timeoutMs !== null ? new TimeoutError(operation, timeoutMs) : new AbortedError(operation, signal?.reason));
          } else {
            reject(err);
          }
        },
      );
    });
  }

  #lookup(key: string, itemsVersion: number, arrival: number, maxStale: number): Kept | undefined {
    if (itemsVersion !== this.#keptVersion) {
      // Results of older items are never asked for again (the version is in the key); a newer
      // version clears them at once rather than letting them age out.
      if (itemsVersion > this.#keptVersion) this.#clear(itemsVersion);
      return undefined;
    }
    const kept = this.#kept.get(key);
    if (kept === undefined) return undefined;
    const age = arrival - kept.nowMs;
    if (age >= 0 && age <= maxStale) return kept;
    // Too old for this level (or the clock went back): it will not be asked for younger.
    if (age > maxStale) this.#forget(key, kept);
    return undefined;
  }

  #keep(key: string, itemsVersion: number, result: unknown, nowMs: number, bytes: number): void {
    if (itemsVersion < this.#keptVersion) return;
    if (itemsVersion > this.#keptVersion) this.#clear(itemsVersion);
    if (this.#o.maxEntries === 0 || bytes > this.#o.maxBytes) return;
    const old = this.#kept.get(key);
    if (old !== undefined) this.#forget(key, old);
    this.#kept.set(key, { result, nowMs, bytes });
    this.#keptBytes += bytes;
    for (const [k, v] of this.#kept) {
      if (this.#kept.size <= this.#o.maxEntries && this.#keptBytes <= this.#o.maxBytes) break;
      this.#forget(k, v);
    }
  }

  #forget(key: string, kept: Kept): void {
    this.#kept.delete(key);
    this.#keptBytes -= kept.bytes;
  }

  #clear(version: number): void {
    this.#kept.clear();
    this.#keptBytes = 0;
    this.#keptVersion = version;
  }
}
