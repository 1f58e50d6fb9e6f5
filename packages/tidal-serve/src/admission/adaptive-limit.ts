import { InvalidInputError } from 'tidal-core';
import { DrainMeter, OnceTicket, checkInteger, checkObject, checkOpenFraction, checkPositive, refuse } from './errors.js';
import { ADAPTIVE_CELLS, SHARED_MAX_CAP, SharedDrainMeter, relMs, type SharedView } from './shared-memory.js';
import type { AdmissionOptions, AdmissionStage, Clock, Outcome, Refusal, RequestInfo, StageStats, Ticket } from './types.js';

/** Settings of {@link createAdaptiveLimit}: `options.adaptive` plus the cap it stays under. */
export type AdaptiveLimitSettings = Exclude<AdmissionOptions['adaptive'], false> & {
  /** The ceiling: `options.inFlightCap`. */
  readonly cap: number;
};

export const ADAPTIVE_DEFAULTS = Object.freeze({
  // More than a quarter of a window slow is a queue, not a pause: under real overload nearly every
  // response waits behind the others, while a GC pause slows only the few requests it caught.
  slowFraction: 0.25,
  // A window of fewer responses is too small to tell a pause from a queue (at 10 a single slow
  // response is 10%, under the 25% bar); a quiet window runs on until it has them.
  minSamples: 10,
  increase: 1,
  // Only the queries: their latency is what the limit learns from, and a write's latency (a group
  // commit, the write queue) says nothing about how many queries the database can take.
  routes: Object.freeze<string[]>(['retrieve', 'search']),
});

/** What a route the limit does not govern gets: a ticket that holds nothing. */
const UNGOVERNED: Ticket = Object.freeze({ admitted: true as const, headers: undefined, release(): void {} });

/** The adaptive limit, with what tests and `/stats` read. */
export interface AdaptiveLimitStage extends AdmissionStage {
  readonly name: 'adaptive';
  /** The current limit, a whole number from `floor` to `cap`. */
  readonly limit: number;
  readonly inFlight: number;
  /** Windows that raised the limit, and windows that cut it. */
  readonly increases: number;
  readonly decreases: number;
}

/**
 * The limit after a good window. At `limit` in flight with responses taking `meanMs` on average,
 * the server completes `limit / meanMs` a millisecond (Little's law); if latency did not grow with
 * load, `limit × target / meanMs` in flight would reach the target. Latency does grow as a queue
 * forms, so the limit moves half way there: far below the target (the queue has drained, the load
 * has fallen) it climbs back to the cap in a few windows, near it it creeps by `increase`. Additive
 * increase alone took (cap − floor) windows: 504 windows, two minutes, from the CLI's floor of 136
 * to a cap of 640, refusing all along whatever the load needed above the limit.
 */
function raise(limit: number, cap: number, increase: number, targetMs: number, meanMs: number): number {
  const room = meanMs > 0 ? (limit * targetMs) / meanMs : cap;
  const step = (Math.min(room, cap) - limit) / 2;
  const up = limit + (step > increase ? step : increase);
  return up < cap ? up : cap;
}

class AdaptiveLimit implements AdaptiveLimitStage {
  readonly name = 'adaptive' as const;
  readonly #clock: Clock;
  readonly #cap: number;
  readonly #floor: number;
  readonly #targetMs: number;
  readonly #windowMs: number;
  readonly #backoff: number;
  readonly #slowFraction: number;
  readonly #minSamples: number;
  readonly #increase: number;
  readonly #routes: ReadonlySet<string>;
  readonly #drain = new DrainMeter();
  /** The limit kept fractional, so repeated cuts and +1s compose exactly; admission reads #whole. */
  #limit: number;
  #whole: number;
  #message = '';
  #inFlight = 0;
  #admitted = 0;
  #rejected = 0;
  #increases = 0;
  #decreases = 0;
  /**
   * Bumped by every cut. A response admitted before the last cut ran under the old, higher limit:
   * its latency says nothing about the new one, and counting it would cut again for the same queue.
   */
  #epoch = 0;
  #windowStartMs: number;
  #samples = 0;
  #slow = 0;
  /** The window's latencies, each counted up to the target: their mean says how much room is left. */
  #latencySum = 0;

  constructor(s: Required<AdaptiveLimitSettings>, clock: Clock) {
    this.#clock = clock;
    this.#cap = s.cap;
    this.#floor = s.floor;
    this.#targetMs = s.targetLatencyMs;
    this.#windowMs = s.windowMs;
    this.#backoff = s.backoff;
    this.#slowFraction = s.slowFraction;
    this.#minSamples = s.minSamples;
    this.#increase = s.increase;
    this.#routes = new Set(s.routes);
    this.#limit = s.initial;
    this.#whole = s.initial;
    this.#setMessage();
    this.#windowStartMs = clock();
  }

  get limit(): number {
    return this.#whole;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  get increases(): number {
    return this.#increases;
  }

  get decreases(): number {
    return this.#decreases;
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    if (!this.#routes.has(request.route)) return UNGOVERNED;
    const n = this.#inFlight;
    if (n >= this.#whole) {
      this.#rejected++;
      // After a cut, in flight can be well over the new limit: all of the excess has to drain first.
      // And never sooner than a window: the limit cannot rise before the window closes.
      const drain = this.#drain.retryAfterMs(n - this.#whole + 1, n, nowMs);
      return refuse('adaptive', drain > this.#windowMs ? drain : this.#windowMs, this.#message);
    }
    this.#inFlight = n + 1;
    this.#admitted++;
    this.#drain.admitted(nowMs);
    return new OnceTicket(this, nowMs, this.#epoch);
  }

  onRelease(ticket: OnceTicket, outcome: Outcome): void {
    this.#inFlight--;
    if (outcome.served === false) return;
    this.#drain.record(outcome.latencyMs);
    if (ticket.epoch !== this.#epoch) return;
    this.#samples++;
    const ms = outcome.latencyMs;
    if (!outcome.ok || ms > this.#targetMs) {
      this.#slow++;
      this.#latencySum += this.#targetMs;
    } else if (ms > 0) this.#latencySum += ms;
    if (this.#samples < this.#minSamples) return;
    const now = this.#clock();
    if (now - this.#windowStartMs >= this.#windowMs) this.#closeWindow(now);
  }

  /** At most one change per window: a cut when too much of it was slow, else one step up. */
  #closeWindow(nowMs: number): void {
    if (this.#slow > this.#samples * this.#slowFraction) {
      const cut = this.#limit * this.#backoff;
      this.#limit = cut > this.#floor ? cut : this.#floor;
      this.#epoch++;
      this.#decreases++;
    } else if (this.#limit < this.#cap) {
      this.#limit = raise(this.#limit, this.#cap, this.#increase, this.#targetMs, this.#latencySum / this.#samples);
      this.#increases++;
    }
    const whole = Math.floor(this.#limit);
    if (whole !== this.#whole) {
      this.#whole = whole;
      this.#setMessage();
    }
    this.#windowStartMs = nowMs;
    this.#samples = 0;
    this.#slow = 0;
    this.#latencySum = 0;
  }

  #setMessage(): void {
    this.#message = `${this.#whole} requests are in flight, the adaptive limit (responses were slower than ${this.#targetMs} ms); retry after x-retry-after-ms`;
  }

  stats(): StageStats {
    return { name: 'adaptive', limit: this.#whole, inFlight: this.#inFlight, admitted: this.#admitted, rejected: this.#rejected };
  }
}

function checkRoutes(value: unknown): readonly string[] {
  if (!Array.isArray(value) || value.some((r) => typeof r !== 'string' || r.length === 0)) {
    throw new InvalidInputError('options.adaptive.routes', 'an array of route names', value);
  }
  return Object.freeze([...(value as string[])]);
}

/**
 * Stage 3: an AIMD limit on requests in flight, below the cap. Each window of `windowMs` (holding at
 * least `minSamples` responses) changes the limit at most once: a cut to `limit × backoff` (not below
 * `floor`) when more than `slowFraction` of its responses were slower than `targetLatencyMs` or
 * failed, otherwise a rise (not above `cap`) of at least `increase` and of half the distance to
 * where the window's mean latency says the target would be met (`limit × target ÷ mean`), so the
 * limit is back at the cap within a few windows once the load has fallen. Deciding on a window's fraction, not on any slow
 * response, is what keeps a single pause from halving the limit. Over the limit, a 503
 * `TIDAL_SERVE_ADAPTIVE` at once, admission never waits, with `retryAfterMs` the time the excess
 * over the limit takes to drain at the measured rate, and never less than `windowMs`. Only the `routes` it governs (the queries)
 * count against it and feed it; any other route passes untouched.
 *
 * @param clock - read when a ticket is released, to close windows.
 * @throws {@link InvalidInputError} naming the `options.adaptive.*` field.
 */
export function createAdaptiveLimit(settings: AdaptiveLimitSettings, clock: Clock): AdaptiveLimitStage {
  return new AdaptiveLimit(resolveAdaptive(settings), clock);
}

/** Checks the settings and fills in the defaults. */
function resolveAdaptive(settings: AdaptiveLimitSettings): Required<AdaptiveLimitSettings> {
  const s = checkObject('options.adaptive', settings);
  const cap = checkInteger('options.inFlightCap', s.cap, 1);
  const floor = checkInteger('options.adaptive.floor', s.floor, 1, cap);
  const initial = s.initial === undefined ? cap : checkInteger('options.adaptive.initial', s.initial, floor, cap);
  return {
    cap,
    floor,
    initial,
    targetLatencyMs: checkPositive('options.adaptive.targetLatencyMs', s.targetLatencyMs),
    windowMs: checkPositive('options.adaptive.windowMs', s.windowMs),
    backoff: checkOpenFraction('options.adaptive.backoff', s.backoff),
    slowFraction:
      s.slowFraction === undefined ? ADAPTIVE_DEFAULTS.slowFraction : checkOpenFraction('options.adaptive.slowFraction', s.slowFraction),
    minSamples: s.minSamples === undefined ? ADAPTIVE_DEFAULTS.minSamples : checkInteger('options.adaptive.minSamples', s.minSamples, 1),
    increase: s.increase === undefined ? ADAPTIVE_DEFAULTS.increase : checkPositive('options.adaptive.increase', s.increase),
    routes: s.routes === undefined ? ADAPTIVE_DEFAULTS.routes : checkRoutes(s.routes),
  };
}

const A = ADAPTIVE_CELLS;

/**
 * The AIMD limit over shared cells. Admission reads the whole limit and adds to the in-flight cell;
 * a release adds its sample to the window's cells, and the thread whose release finds the window
 * due closes it: of the threads that find it due at once, the one whose compareExchange moves the
 * window's start wins, and only it changes the limit. The limit is kept × 1000 in an Int32 so cuts
 * and rises compose in whole numbers.
 */
class SharedAdaptiveLimit implements AdaptiveLimitStage {
  readonly name = 'adaptive' as const;
  readonly #s: Required<AdaptiveLimitSettings>;
  readonly #clock: Clock;
  readonly #view: SharedView;
  readonly #c: Int32Array;
  readonly #at: number;
  readonly #routes: ReadonlySet<string>;
  readonly #drain: SharedDrainMeter;
  #messageFor = -1;
  #message = '';

  constructor(s: Required<AdaptiveLimitSettings>, clock: Clock, view: SharedView) {
    this.#s = s;
    this.#clock = clock;
    this.#view = view;
    this.#c = view.cells;
    this.#at = view.layout.adaptive;
    this.#routes = new Set(s.routes);
    this.#drain = new SharedDrainMeter(view, this.#at + A.drain);
  }

  get limit(): number {
    return Atomics.load(this.#c, this.#at + A.whole);
  }

  get inFlight(): number {
    return Atomics.load(this.#c, this.#at + A.inFlight);
  }

  get increases(): number {
    return Atomics.load(this.#c, this.#at + A.increases);
  }

  get decreases(): number {
    return Atomics.load(this.#c, this.#at + A.decreases);
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    if (!this.#routes.has(request.route)) return UNGOVERNED;
    const c = this.#c;
    const at = this.#at;
    const whole = Atomics.load(c, at + A.whole);
    const n = Atomics.add(c, at + A.inFlight, 1);
    if (n >= whole) {
      Atomics.sub(c, at + A.inFlight, 1);
      Atomics.add(c, at + A.rejected, 1);
      const drain = this.#drain.retryAfterMs(n - whole + 1, n, nowMs);
      return refuse('adaptive', drain > this.#s.windowMs ? drain : this.#s.windowMs, this.#messageOf(whole));
    }
    Atomics.add(c, at + A.admitted, 1);
    this.#drain.admitted(nowMs);
    return new OnceTicket(this, nowMs, Atomics.load(c, at + A.epoch));
  }

  #messageOf(whole: number): string {
    if (whole !== this.#messageFor) {
      this.#messageFor = whole;
      this.#message = `${whole} requests are in flight, the adaptive limit (responses were slower than ${this.#s.targetLatencyMs} ms); retry after x-retry-after-ms`;
    }
    return this.#message;
  }

  onRelease(ticket: OnceTicket, outcome: Outcome): void {
    const c = this.#c;
    const at = this.#at;
    Atomics.sub(c, at + A.inFlight, 1);
    if (outcome.served === false) return;
    this.#drain.record(outcome.latencyMs);
    if (ticket.epoch !== Atomics.load(c, at + A.epoch)) return;
    const target = this.#s.targetLatencyMs;
    const ms = outcome.latencyMs;
    if (!outcome.ok || ms > target) {
      Atomics.add(c, at + A.slow, 1);
      Atomics.add(c, at + A.latencySum, Math.round(target));
    } else if (ms > 0) Atomics.add(c, at + A.latencySum, Math.round(ms));
    if (Atomics.add(c, at + A.samples, 1) + 1 < this.#s.minSamples) return;
    const now = relMs(this.#view, this.#clock());
    const start = Atomics.load(c, at + A.windowStart);
    const elapsed = (now - start) | 0;
    // Negative: more than 2³¹ ms since the start (the difference wrapped): long due.
    if (elapsed >= 0 && elapsed < this.#s.windowMs) return;
    if (Atomics.compareExchange(c, at + A.windowStart, start, now) === start) this.#closeWindow();
  }

  #closeWindow(): void {
    const c = this.#c;
    const at = this.#at;
    const s = this.#s;
    const samples = Atomics.exchange(c, at + A.samples, 0);
    const slow = Atomics.exchange(c, at + A.slow, 0);
    const sum = Atomics.exchange(c, at + A.latencySum, 0);
    if (samples === 0) return;
    const limit = Atomics.load(c, at + A.limitMilli) / 1000;
    let next = limit;
    if (slow > samples * s.slowFraction) {
      const cut = limit * s.backoff;
      next = cut > s.floor ? cut : s.floor;
      Atomics.add(c, at + A.epoch, 1);
      Atomics.add(c, at + A.decreases, 1);
    } else if (limit < s.cap) {
      next = raise(limit, s.cap, s.increase, s.targetLatencyMs, sum / samples);
      Atomics.add(c, at + A.increases, 1);
    }
    const milli = Math.floor(next * 1000);
    Atomics.store(c, at + A.limitMilli, milli);
    Atomics.store(c, at + A.whole, Math.floor(milli / 1000));
  }

  stats(): StageStats {
    const c = this.#c;
    const at = this.#at;
    return {
      name: 'adaptive',
      limit: Atomics.load(c, at + A.whole),
      inFlight: Atomics.load(c, at + A.inFlight),
      admitted: Atomics.load(c, at + A.admitted),
      rejected: Atomics.load(c, at + A.rejected),
    };
  }
}

/** {@link createAdaptiveLimit} over a shared state's cells (built by the chain with `{ shared }`). */
export function createAdaptiveLimitInSharedMemory(settings: AdaptiveLimitSettings, clock: Clock, view: SharedView): AdaptiveLimitStage {
  const s = resolveAdaptive(settings);
  if (s.cap > SHARED_MAX_CAP)
    throw new InvalidInputError('options.inFlightCap', `a whole number up to ${SHARED_MAX_CAP} for a shared adaptive limit`, s.cap);
  return new SharedAdaptiveLimit(s, clock, view);
}
