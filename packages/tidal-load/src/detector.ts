import { InvalidInputError, OverloadedError } from './errors.js';
import { DegradationLevel } from './levels.js';

/** In-flight counts at which each degraded level starts. */
export interface Thresholds {
  reducedCandidates: number;
  coarseAggregates: number;
  noDiversity: number;
}

/**
 * Defaults for a 2-core machine, from the overload benchmark (docs/overload.md):
 *
 * Little's law, N = X × R. Measured on the bench corpus (100 000 items, 2 query workers), a Full
 * query costs S ≈ 1.5 ms of worker time on average, so the pool's capacity is C ≈ W / S ≈ 2 / 1.5 ms
 * ≈ 1 300 queries/s, and at capacity with healthy latency the in-flight count is a handful
 * (N ≈ W + a short queue ≈ 2–10). Every query in flight beyond the W running ones waits ≈ S / W, so an
 * in-flight count of N means ≈ N × S / W of queueing:
 * - 32 in flight ≈ 24 ms of queue: well past healthy, the first sign of saturation → ReducedCandidates;
 * - 64 ≈ 48 ms → CoarseAggregates;
 * - 128 ≈ 96 ms → NoDiversity, the cheapest level; at 3× C it must hold the queue there, and 128
 *   queries at the degraded cost keep p99 inside the 250 ms target.
 * The seed's 200 / 500 / 1000 are for a larger machine: at 2 cores they would let 1 000 queries
 * (≈ 0.75 s of queue) pile up before the last step. They remain expressible through the builder.
 */
export const DEFAULT_THRESHOLDS: Readonly<Thresholds> = Object.freeze({
  reducedCandidates: 32,
  coarseAggregates: 64,
  noDiversity: 128,
});

/** Validates thresholds: positive whole numbers, strictly increasing. */
export function resolveThresholds(value: Partial<Thresholds> | undefined, field = 'loadThresholds'): Thresholds {
  const t = { ...DEFAULT_THRESHOLDS, ...stripUndefined(value ?? {}) };
  const order: (keyof Thresholds)[] = ['reducedCandidates', 'coarseAggregates', 'noDiversity'];
  let prev = 0;
  for (const key of order) {
    const v = t[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 2 ** 30) {
      throw new InvalidInputError(`${field}.${key}`, 'a positive whole number', v);
    }
    if (v <= prev) {
      throw new InvalidInputError(`${field}.${key}`, `greater than the previous threshold (${prev}); thresholds must strictly increase`, v);
    }
    prev = v;
  }
  return t;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * A query's hold on an in-flight slot. Dispose it exactly when the query is done (`using guard =
 * detector.enter()`); disposing twice is harmless, never disposing it leaks the slot (the count
 * stays up, which `inFlight` shows).
 */
export class InFlightGuard implements Disposable {
  /** The level the query runs at, fixed at entry. */
  readonly level: DegradationLevel;
  /** The in-flight count at entry, this query included. */
  readonly inFlightAtEntry: number;
  #detector: LoadDetector | null;

  /** @internal */
  constructor(detector: LoadDetector, level: DegradationLevel, inFlightAtEntry: number) {
    this.#detector = detector;
    this.level = level;
    this.inFlightAtEntry = inFlightAtEntry;
  }

  get disposed(): boolean {
    return this.#detector === null;
  }

  [Symbol.dispose](): void {
    const d = this.#detector;
    if (d === null) return;
    this.#detector = null;
    d.release();
  }
}

export interface LoadDetectorOptions {
  thresholds?: Partial<Thresholds>;
  /**
   * Hard cap on queries in flight; past it `enter()` throws {@link OverloadedError}. `0` disables it.
   * @default 0 (the database resolves its own default, see `resolveAdmissionLimit`)
   */
  admissionLimit?: number;
  /** The Retry-After a refusal carries, given the in-flight count and the limit. */
  retryAfterMs?: (inFlight: number, limit: number) => number;
  /** An existing counter buffer (4 bytes) to share; one is created otherwise. */
  buffer?: SharedArrayBuffer;
}

/**
 * Counts queries in flight in a SharedArrayBuffer, changed only with Atomics so any thread can read
 * it, and turns the count at entry into a {@link DegradationLevel}. The level is decided once, at
 * entry: a query never changes level midway.
 */
export class LoadDetector {
  readonly thresholds: Readonly<Thresholds>;
  readonly admissionLimit: number;
  readonly #count: Int32Array;
  readonly #retryAfterMs: (inFlight: number, limit: number) => number;
  #rejected = 0;

  constructor(options: LoadDetectorOptions = {}) {
    this.thresholds = Object.freeze(resolveThresholds(options.thresholds));
    const limit = options.admissionLimit ?? 0;
    if (!Number.isInteger(limit) || limit < 0) throw new InvalidInputError('admissionLimit', "a whole number ≥ 0 (0 disables it)", limit);
    if (limit !== 0 && limit <= this.thresholds.noDiversity) {
      throw new InvalidInputError(
        'admissionLimit',
        `above the last degradation threshold (noDiversity = ${this.thresholds.noDiversity}), or 0 to disable it`,
        limit,
      );
    }
    this.admissionLimit = limit;
    this.#count = new Int32Array(options.buffer ?? new SharedArrayBuffer(4));
    this.#retryAfterMs = options.retryAfterMs ?? (() => 1);
  }

  /** The shared counter, for another thread to map with `new Int32Array(buffer)`. */
  get buffer(): SharedArrayBuffer {
    return this.#count.buffer as SharedArrayBuffer;
  }

  /** Queries in flight now. */
  get inFlight(): number {
    return Atomics.load(this.#count, 0);
  }

  /** Queries refused by the admission cap since creation. */
  get rejected(): number {
    return this.#rejected;
  }

  /** The level a query entering now would get. */
  get level(): DegradationLevel {
    return this.levelFor(Atomics.load(this.#count, 0) + 1);
  }

  /** The level for an in-flight count (the entering query included). */
  levelFor(n: number): DegradationLevel {
    const t = this.thresholds;
    if (n >= t.noDiversity) return DegradationLevel.NoDiversity;
    if (n >= t.coarseAggregates) return DegradationLevel.CoarseAggregates;
    if (n >= t.reducedCandidates) return DegradationLevel.ReducedCandidates;
    return DegradationLevel.Full;
  }

  /**
   * Takes an in-flight slot and decides the query's level: one atomic add and a compare. Over the
   * admission limit it gives the slot back and throws {@link OverloadedError} at once.
   */
  enter(): InFlightGuard {
    const n = Atomics.add(this.#count, 0, 1) + 1;
    if (this.admissionLimit !== 0 && n > this.admissionLimit) {
      Atomics.sub(this.#count, 0, 1);
      this.#rejected++;
      throw new OverloadedError(n - 1, this.admissionLimit, this.#retryAfterMs(n - 1, this.admissionLimit));
    }
    return new InFlightGuard(this, this.levelFor(n), n);
  }

  /** @internal Called by {@link InFlightGuard} once. */
  release(): void {
    Atomics.sub(this.#count, 0, 1);
  }
}
