import { InvalidInputError, OverloadedError } from './errors.js';
import { DegradationLevel } from './levels.js';

/**
 * How much a query matters to its caller, which decides its place in the queue and how early load
 * degrades and refuses it:
 * - `'critical'`: runs before every waiting `'default'` and `'sheddable'` query;
 * - `'default'`: the level and the admission cap follow the in-flight count;
 * - `'sheddable'` (previews, prefetch, background refreshes): runs after every waiting query, and
 *   is degraded and refused as if twice as many queries were in flight (see {@link LoadDetector.tryEnter}).
 */
export type Criticality = 'critical' | 'default' | 'sheddable';

export const CRITICALITIES: readonly Criticality[] = Object.freeze(['critical', 'default', 'sheddable']);

/** Validates a query's `criticality` option; `undefined` is `'default'`. */
export function checkCriticality(value: unknown, field = 'criticality'): Criticality {
  if (value === undefined) return 'default';
  if (value !== 'critical' && value !== 'default' && value !== 'sheddable') {
    throw new InvalidInputError(field, "one of 'critical', 'default', 'sheddable'", value);
  }
  return value;
}

/**
 * The in-flight count a sheddable query is judged by: twice the real one. One rule gives both
 * halves of "degraded first, refused first": with the default thresholds (32 / 64 / 128) and cap
 * (512 on 2 workers) a sheddable query degrades at 16 / 32 / 64 in flight and is refused past 256,
 * where a default query still runs at NoDiversity.
 */
export const SHEDDABLE_LOAD_FACTOR = 2;

/** In-flight counts at which each degraded level starts. */
export interface Thresholds {
  reducedCandidates: number;
  coarseAggregates: number;
  noDiversity: number;
}

/**
 * Defaults for a 2-core machine, from the overload benchmark (docs/overload.md; 100 000 items,
 * 2 query workers, mixed retrieve and search), re-derived after the levels were made to cut work:
 *
 * Little's law, N = X × R. Measured capacity at Full C ≈ 2 570 queries/s (p50 worker time
 * 0.84 ms), and at 1× C (open loop) the p50 latency was 5 ms: N ≈ 2 570 × 0.005 ≈ 13 in flight
 * when healthy. An in-flight count of N means ≈ N / C of queueing:
 * - 32 in flight ≈ 12 ms of queue: past healthy, the first sign of saturation → ReducedCandidates;
 * - 64 ≈ 25 ms → CoarseAggregates (0.36× the cost of Full on the mix);
 * - 128 ≈ 50 ms → NoDiversity (0.32× of Full, ≈ 4 600 queries/s sustained); the admission cap
 *   (128 + 192 × workers = 512, derived beside tidal-core's `autoAdmissionLimit`) bounds what waits
 *   behind it to ≈ 120 ms at that rate, and leaves the cheapest level room to absorb a stall.
 * At 1× C these gave 91 % of queries at Full (p99 71 ms), and the level was back to Full 234 ms
 * after the load dropped. The seed's 200 / 500 / 1000 are for a larger machine: at 2 cores they would
 * let 1 000 queries (≈ 0.2 s of queue at the cheapest level) pile up before the last step. They
 * remain expressible through the builder.
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

/** The largest admission cap accepted: far above any in-flight count a process can hold. */
const MAX_ADMISSION_LIMIT = 2 ** 30;

/**
 * Validates an admission cap: `0` (no cap) or a whole number above the last threshold, so the cap
 * never refuses a query that would still have been served at a better level. `'auto'` is accepted
 * only when `auto` gives the number it stands for.
 * @throws {@link InvalidInputError} naming `field` and the value.
 */
export function resolveAdmissionLimit(
  value: unknown,
  thresholds: Readonly<Thresholds>,
  options: { field?: string; auto?: number } = {},
): number {
  const field = options.field ?? 'admissionLimit';
  if (value === 'auto' && options.auto !== undefined) return options.auto;
  const accepted = `${options.auto === undefined ? '' : "'auto', "}0 (disabled) or a whole number above loadThresholds.noDiversity (${thresholds.noDiversity})`;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_ADMISSION_LIMIT) {
    throw new InvalidInputError(field, accepted, value);
  }
  if (value !== 0 && value <= thresholds.noDiversity) throw new InvalidInputError(field, accepted, value);
  return value;
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
  /** The level the load allows the query, fixed at entry (for a sheddable query, the doubled load's). */
  readonly level: DegradationLevel;
  /** The in-flight count at entry, this query included (the real count, not the doubled one). */
  readonly inFlightAtEntry: number;
  /** The level the in-flight count alone gives, whatever the criticality. */
  readonly loadLevel: DegradationLevel;
  #detector: LoadDetector | null;

  /** @internal */
  constructor(detector: LoadDetector, level: DegradationLevel, inFlightAtEntry: number, loadLevel: DegradationLevel = level) {
    this.#detector = detector;
    this.level = level;
    this.inFlightAtEntry = inFlightAtEntry;
    this.loadLevel = loadLevel;
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
   * @default 0 (the database resolves its own default, `'auto'`, through {@link resolveAdmissionLimit})
   */
  admissionLimit?: number;
  /** The Retry-After a refusal carries, given the in-flight count and the admission limit. */
  retryAfterMs?: (inFlight: number, admissionLimit: number) => number;
  /**
   * Another detector's {@link LoadDetector.buffer}: this one counts in the same cell, so detectors
   * in several threads (one per HTTP acceptor) see one in-flight count and pick levels as one.
   * @default a counter of its own
   */
  shared?: SharedArrayBuffer;
}

/**
 * What an application may see of the load detector: figures to read, nothing to change. A
 * {@link LoadDetector} is one, so a database can hand out its detector typed as this.
 */
export interface LoadView {
  /** Queries in flight now. */
  readonly inFlight: number;
  /** The level a query entering now would get. */
  readonly level: DegradationLevel;
  /** Queries refused by the admission cap so far. */
  readonly rejected: number;
  readonly thresholds: Readonly<Thresholds>;
  /** The admission cap; `0` when there is none. */
  readonly admissionLimit: number;
}

/**
 * Counts queries in flight in a SharedArrayBuffer, changed only with Atomics so any thread can read
 * it, and turns the count at entry into a {@link DegradationLevel}. The level is decided once, at
 * entry: a query never changes level midway.
 */
export class LoadDetector implements LoadView {
  readonly thresholds: Readonly<Thresholds>;
  readonly admissionLimit: number;
  readonly #count: Int32Array;
  readonly #retryAfterMs: (inFlight: number, admissionLimit: number) => number;
  #rejected = 0;

  constructor(options: LoadDetectorOptions = {}) {
    this.thresholds = Object.freeze(resolveThresholds(options.thresholds));
    this.admissionLimit = resolveAdmissionLimit(options.admissionLimit ?? 0, this.thresholds);
    this.#count = new Int32Array(options.shared ?? new SharedArrayBuffer(4), 0, 1);
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
  enter(criticality: Criticality = 'default'): InFlightGuard {
    const admitted = this.tryEnter(criticality);
    if (admitted instanceof OverloadedError) throw admitted;
    return admitted;
  }

  /**
   * {@link enter} without the throw: the refusal is returned, so a caller that answers with a
   * rejected promise pays for no exception. A sheddable query is judged by twice the in-flight
   * count ({@link SHEDDABLE_LOAD_FACTOR}), for its level and against the cap: refused once the
   * count passes half the cap. Its slot still counts once.
   */
  tryEnter(criticality: Criticality = 'default'): InFlightGuard | OverloadedError {
    const n = Atomics.add(this.#count, 0, 1) + 1;
    const judged = criticality === 'sheddable' ? n * SHEDDABLE_LOAD_FACTOR : n;
    if (this.admissionLimit !== 0 && judged > this.admissionLimit) {
      Atomics.sub(this.#count, 0, 1);
      this.#rejected++;
      return new OverloadedError(n - 1, this.admissionLimit, this.#retryAfterMs(n - 1, this.admissionLimit));
    }
    const loadLevel = this.levelFor(n);
    return new InFlightGuard(this, judged === n ? loadLevel : this.levelFor(judged), n, loadLevel);
  }

  /** @internal Called by {@link InFlightGuard} once. */
  release(): void {
    Atomics.sub(this.#count, 0, 1);
  }
}
