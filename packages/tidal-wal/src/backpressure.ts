/**
 * Backpressure arithmetic: how fast the writer drains the queue, and how long a refused caller
 * should wait before the queue is below its threshold again.
 */

/**
 * The shortest `retryAfterMs` ever returned. The writer commits at most one batch per turn of the
 * event loop, so nothing drains sooner than a turn; a retry in under a millisecond would only be
 * refused again.
 */
export const RETRY_AFTER_MIN_MS = 1;

/**
 * The longest `retryAfterMs` ever returned. A drain estimate that says "minutes" comes from a writer
 * that was stalled (a slow disk, a long checkpoint), and the stall is usually over before the
 * estimate is: callers come back at least this often and get a fresh estimate.
 */
export const RETRY_AFTER_MAX_MS = 10_000;

/**
 * Time (ms) after which a drain sample counts half as much as a new one. One second smooths over a
 * garbage-collection pause or a checkpoint while still following a change of load within seconds.
 */
export const DRAIN_HALF_LIFE_MS = 1_000;

/**
 * `retryAfterMs` for a write refused at queue depth `depth` with threshold `limit`:
 *
 *     retryAfterMs = clamp(ceil((depth − limit + 1) / drainPerMs), RETRY_AFTER_MIN_MS, RETRY_AFTER_MAX_MS)
 *
 * `depth − maxQueueEvents + 1` events must commit before the depth is below the threshold again, and the
 * writer drains `drainPerMs` events per millisecond. For a given drain rate the result never
 * decreases as `depth` grows (ceil and clamp are monotone), so a deeper queue never asks for an
 * earlier retry.
 */
export function retryAfterMs(depth: number, maxQueueEvents: number, drainPerMs: number): number {
  const excess = Math.max(1, depth - maxQueueEvents + 1);
  const ms = drainPerMs > 0 && Number.isFinite(drainPerMs) ? Math.ceil(excess / drainPerMs) : RETRY_AFTER_MAX_MS;
  return Math.min(RETRY_AFTER_MAX_MS, Math.max(RETRY_AFTER_MIN_MS, ms));
}

/**
 * The measured drain rate of the write queue, in events per millisecond.
 *
 * Each committed batch is a sample of (events, elapsed ms), where elapsed runs from the moment the
 * batch was due (its size reached `maxBatch`, its delay ran out, or the previous batch finished with
 * events still queued) to the moment its promises could resolve. Under a backlog the samples are
 * back to back, so the estimate includes everything else the event loop did between batches: it is
 * the rate the queue actually shrinks at, not the speed of SQLite alone.
 *
 * The estimate is the ratio of exponentially decayed sums, Σ events / Σ ms, each sample weighted by
 * `2^(−age / halfLifeMs)`. A ratio of sums (rather than an average of per-batch rates) weights each
 * batch by the time it took, so a burst of tiny fast batches cannot outvote one slow one.
 */
export class DrainRate {
  readonly #halfLifeMs: number;
  readonly #priorPerMs: number;
  #events = 0;
  #ms = 0;

  /**
   * @param priorPerMs the estimate before the first sample.
   * @param halfLifeMs how fast old samples fade.
   */
  constructor(priorPerMs: number, halfLifeMs = DRAIN_HALF_LIFE_MS) {
    this.#priorPerMs = priorPerMs;
    this.#halfLifeMs = halfLifeMs;
  }

  /** Adds a sample: `events` drained in `elapsedMs`. */
  record(events: number, elapsedMs: number): void {
    // A clock that did not move (a coarse timer, an injected test clock) still took some time.
    const ms = Math.max(elapsedMs, 1e-3);
    const keep = 2 ** (-ms / this.#halfLifeMs);
    this.#events = this.#events * keep + events;
    this.#ms = this.#ms * keep + ms;
  }

  /** Events drained per millisecond (the prior until the first sample). */
  get perMs(): number {
    return this.#ms > 0 ? this.#events / this.#ms : this.#priorPerMs;
  }

  /** Whether at least one batch has been measured. */
  get measured(): boolean {
    return this.#ms > 0;
  }
}
