/**
 * The in-flight stage's rate bound: Little's law on the measured service rate. A queue that holds
 * `L` requests, drained at `X` a millisecond, keeps its last arrival `L / X` ms, so holding the
 * queries in flight to `X × targetWaitMs` keeps what is admitted within the target wait, and
 * refuses the rest at once. A fixed bound (512 queries, 640 requests) does not: at 10× C it held
 * 640 connections of a client's pool for ≈ 0.6 s each, and the refusals queued behind them in the
 * client.
 *
 * `X` is the completions of the governed routes counted over windows of `windowMs` (closed by the
 * release that finds its window over, so an idle server does no work), smoothed over windows.
 * Served and ok only: a refusal by a later stage or a failure is no service.
 */
import { InvalidInputError } from 'tidal-core';
import { checkInteger, checkObject, checkPositive } from './errors.js';
import { RATE_CELLS, UNSET_TIME, relMs, type SharedView } from './shared-memory.js';
import type { AdmissionOptions } from './types.js';

/** `options.rateBound` when on. */
export type RateBoundSettings = Exclude<NonNullable<AdmissionOptions['rateBound']>, false>;

export const RATE_BOUND_DEFAULTS = Object.freeze({
  // 100 ms holds 100 completions at 1 000/s: a rate, not a handful of samples, and a bound that
  // follows a change of the service rate within a few windows.
  windowMs: 100,
  // The queries: a write is held for one group-commit window (≈ 4 ms); counting its completions
  // would let the queries wait longer than the target by the writes' share of the rate.
  routes: Object.freeze<string[]>(['retrieve', 'search']),
});

/**
 * Weight of a closed window's rate in the running rate: half for a window of `windowMs`, so a step
 * change shows in 2–3 windows, and as much as that many windows for a longer one (a quiet spell
 * closes late), so a trickle after a burst is a trickle.
 */
function weightOf(elapsedMs: number, windowMs: number): number {
  return 1 - 0.5 ** (elapsedMs / windowMs);
}

/** Checked settings with the defaults filled in. */
export interface ResolvedRateBound {
  readonly targetWaitMs: number;
  readonly floor: number;
  readonly windowMs: number;
  readonly routes: ReadonlySet<string>;
}

/**
 * Checks `options.rateBound` against the cap it stays under.
 * @throws {@link InvalidInputError} naming the `options.rateBound.*` field.
 */
export function resolveRateBound(value: unknown, cap: number): ResolvedRateBound | null {
  if (value === undefined || value === false) return null;
  const s = checkObject('options.rateBound', value);
  const routes = s.routes ?? RATE_BOUND_DEFAULTS.routes;
  if (!Array.isArray(routes) || routes.length === 0 || routes.some((r) => typeof r !== 'string' || r.length === 0))
    throw new InvalidInputError('options.rateBound.routes', 'a non-empty array of route names', routes);
  return {
    targetWaitMs: checkPositive('options.rateBound.targetWaitMs', s.targetWaitMs),
    floor: checkInteger('options.rateBound.floor', s.floor, 1, cap),
    windowMs: s.windowMs === undefined ? RATE_BOUND_DEFAULTS.windowMs : checkPositive('options.rateBound.windowMs', s.windowMs),
    routes: new Set(routes as string[]),
  };
}

/** The bound for a rate (completions a millisecond): `rate × targetWaitMs`, from `floor` to `cap`. */
export function boundFor(ratePerMs: number, targetWaitMs: number, floor: number, cap: number): number {
  const b = Math.floor(ratePerMs * targetWaitMs);
  return b < floor ? floor : b > cap ? cap : b;
}

/** What the in-flight stage asks of its rate bound, single-thread or shared. */
export interface RateBoundMeter {
  /** Governed requests in flight now. */
  readonly inFlight: number;
  /** The bound they are held to. */
  readonly limit: number;
  /** The running service rate, completions a second (0 before the first window closed). */
  readonly ratePerSec: number;
  /** Takes a governed slot, or returns false at the bound. */
  tryEnter(nowMs: number): boolean;
  /** Gives a slot back; `endMs` (its release time) counts a completion when `served`. */
  leave(endMs: number, served: boolean): void;
}

/** The single-thread meter. Until its first window closes the bound is the floor: no rate is known yet. */
export class LocalRateBound implements RateBoundMeter {
  readonly #s: ResolvedRateBound;
  readonly #cap: number;
  #inFlight = 0;
  #limit: number;
  #ratePerMs = -1;
  #windowStart = Number.NaN;
  #completions = 0;

  constructor(s: ResolvedRateBound, cap: number) {
    this.#s = s;
    this.#cap = cap;
    this.#limit = s.floor;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  get limit(): number {
    return this.#limit;
  }

  get ratePerSec(): number {
    return this.#ratePerMs < 0 ? 0 : this.#ratePerMs * 1000;
  }

  tryEnter(nowMs: number): boolean {
    if (this.#inFlight >= this.#limit) return false;
    this.#inFlight++;
    if (this.#windowStart !== this.#windowStart) this.#windowStart = nowMs;
    return true;
  }

  leave(endMs: number, served: boolean): void {
    this.#inFlight--;
    if (!served) return;
    this.#completions++;
    const elapsed = endMs - this.#windowStart;
    if (!(elapsed >= this.#s.windowMs)) return;
    const r = this.#completions / elapsed;
    this.#ratePerMs = this.#ratePerMs < 0 ? r : this.#ratePerMs + (r - this.#ratePerMs) * weightOf(elapsed, this.#s.windowMs);
    this.#limit = boundFor(this.#ratePerMs, this.#s.targetWaitMs, this.#s.floor, this.#cap);
    this.#windowStart = endMs;
    this.#completions = 0;
  }
}

/**
 * The meter over shared cells: every thread's releases count into one window, and the thread whose
 * release finds it over (its compareExchange moves the window's start) closes it. The rate is kept
 * in millionths of a completion a millisecond (an Int32 holds up to 2 × 10⁶ a second).
 */
export class SharedRateBound implements RateBoundMeter {
  readonly #s: ResolvedRateBound;
  readonly #cap: number;
  readonly #view: SharedView;
  readonly #c: Int32Array;
  readonly #at: number;

  constructor(s: ResolvedRateBound, cap: number, view: SharedView, at: number) {
    this.#s = s;
    this.#cap = cap;
    this.#view = view;
    this.#c = view.cells;
    this.#at = at;
  }

  get inFlight(): number {
    return Atomics.load(this.#c, this.#at + RATE_CELLS.inFlight);
  }

  get limit(): number {
    return Atomics.load(this.#c, this.#at + RATE_CELLS.limit);
  }

  get ratePerSec(): number {
    const r = Atomics.load(this.#c, this.#at + RATE_CELLS.rateMicro);
    return r < 0 ? 0 : r / 1000;
  }

  tryEnter(nowMs: number): boolean {
    const c = this.#c;
    const at = this.#at;
    // Of the threads racing for the last slot, one gets it.
    if (Atomics.add(c, at + RATE_CELLS.inFlight, 1) >= Atomics.load(c, at + RATE_CELLS.limit)) {
      Atomics.sub(c, at + RATE_CELLS.inFlight, 1);
      return false;
    }
    if (Atomics.load(c, at + RATE_CELLS.windowStart) === UNSET_TIME)
      Atomics.compareExchange(c, at + RATE_CELLS.windowStart, UNSET_TIME, relMs(this.#view, nowMs));
    return true;
  }

  leave(endMs: number, served: boolean): void {
    const c = this.#c;
    const at = this.#at;
    Atomics.sub(c, at + RATE_CELLS.inFlight, 1);
    if (!served) return;
    Atomics.add(c, at + RATE_CELLS.completions, 1);
    const start = Atomics.load(c, at + RATE_CELLS.windowStart);
    if (start === UNSET_TIME) return;
    const now = relMs(this.#view, endMs);
    const elapsed = (now - start) | 0;
    if (elapsed < this.#s.windowMs) return;
    if (Atomics.compareExchange(c, at + RATE_CELLS.windowStart, start, now) !== start) return;
    const count = Atomics.exchange(c, at + RATE_CELLS.completions, 0);
    const r = count / elapsed;
    const old = Atomics.load(c, at + RATE_CELLS.rateMicro);
    const rate = old < 0 ? r : old / 1e6 + (r - old / 1e6) * weightOf(elapsed, this.#s.windowMs);
    Atomics.store(c, at + RATE_CELLS.rateMicro, Math.min(0x7fffffff, Math.round(rate * 1e6)));
    Atomics.store(c, at + RATE_CELLS.limit, boundFor(rate, this.#s.targetWaitMs, this.#s.floor, this.#cap));
  }
}
