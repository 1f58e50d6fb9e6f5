/**
 * Whether a bench:serve phase measured the server or the load generator. Latency runs from each
 * request's scheduled time, so a generator that falls behind its own schedule (its event loop
 * lagging, its sends leaving late) bills its own delay to the server. Such a phase is INVALID: its
 * goodput and refusals are still what the server answered, but its latencies are not the server's.
 *
 * A request that waits for a free connection of the generator's pool (`--connections`, bench:serve's
 * `--pool`) is billed that wait too, but the wait is what a client with a bounded pool meets, not
 * the generator falling behind: the lateness is measured before the pool (`sendLateness`), the
 * wait after it (`poolWait`), and only the first can make a phase INVALID.
 */
import { InvalidInputError } from 'tidal-core';

/** When a phase stops counting as a measurement of the server. */
export interface ValidityThresholds {
  /**
   * Largest acceptable p99 of the generator's own event-loop lag, in ms beyond the 10 ms period of
   * the timer that measures it (`generator.loopLagP99Ms`). @default VALIDITY_DEFAULTS.maxLagP99Ms
   */
  readonly maxLagP99Ms: number;
  /**
   * Largest acceptable share (0..1) of open-loop sends made more than `lateMs` after their scheduled
   * time (`sendLateness.late / sendLateness.sends`; the generator's `--late-ms`).
   * @default VALIDITY_DEFAULTS.maxLateShare
   */
  readonly maxLateShare: number;
}

/**
 * 10 ms of lag at p99 is already a tenth of the 0.5× C phase's p99 on 2 cores (docs/serve.md);
 * 1 % of sends more than 5 ms late (the generator's default `--late-ms`) moves a p99 by up to the
 * lateness itself, so past it the p99 is the generator's.
 */
export const VALIDITY_DEFAULTS: Readonly<ValidityThresholds> = Object.freeze({ maxLagP99Ms: 10, maxLateShare: 0.01 });

/** What the generator reports of its own health over one phase (a subset of its `LoadResult`). */
export interface GeneratorHealth {
  readonly generator: { readonly loopLagP99Ms: number };
  /** `null` for a closed loop, whose requests are scheduled when they are sent. */
  readonly sendLateness: { readonly p99: number; readonly late: number; readonly sends: number; readonly lateMs: number } | null;
  /** Arrivals the generator dropped past its outstanding limit instead of sending them. */
  readonly generatorDropped: number;
  /** The wait for a free connection of the pool; absent or `null` when the client does not measure it. */
  readonly poolWait?: { readonly p99: number } | null;
}

export interface Validity {
  readonly valid: boolean;
  /** Why it is not, one short sentence each; empty when valid. */
  readonly reasons: readonly string[];
  readonly lagP99Ms: number;
  readonly latenessP99Ms: number | null;
  /** Share of sends later than `lateMs`, or `null` for a closed loop (or no sends). */
  readonly lateShare: number | null;
  /** The pool's wait p99 in ms, reported beside the lateness and never a reason; `null` when not measured. */
  readonly poolWaitP99Ms: number | null;
}

/** Checks thresholds given on the command line or by a caller. */
export function checkThresholds(t: ValidityThresholds): ValidityThresholds {
  if (!Number.isFinite(t.maxLagP99Ms) || t.maxLagP99Ms < 0) throw new InvalidInputError('maxLagP99Ms', 'a number of ms ≥ 0', t.maxLagP99Ms);
  if (!Number.isFinite(t.maxLateShare) || t.maxLateShare < 0 || t.maxLateShare > 1)
    throw new InvalidInputError('maxLateShare', 'a share from 0 to 1', t.maxLateShare);
  return Object.freeze({ ...t });
}

/** The decision for one phase: valid unless the generator lagged, sent late, or dropped arrivals. */
export function judgePhase(health: GeneratorHealth, thresholds: ValidityThresholds = VALIDITY_DEFAULTS): Validity {
  const reasons: string[] = [];
  const lag = health.generator.loopLagP99Ms;
  if (lag > thresholds.maxLagP99Ms) reasons.push(`generator event-loop lag p99 ${lag.toFixed(1)} ms > ${thresholds.maxLagP99Ms} ms`);
  const l = health.sendLateness;
  const lateShare = l === null || l.sends === 0 ? null : l.late / l.sends;
  if (lateShare !== null && lateShare > thresholds.maxLateShare) {
    reasons.push(
      `${(lateShare * 100).toFixed(1)} % of sends more than ${l!.lateMs} ms late > ${(thresholds.maxLateShare * 100).toFixed(1)} %`,
    );
  }
  if (health.generatorDropped > 0) reasons.push(`generator dropped ${health.generatorDropped} arrivals (outstanding limit)`);
  return {
    valid: reasons.length === 0,
    reasons,
    lagP99Ms: lag,
    latenessP99Ms: l === null ? null : l.p99,
    lateShare,
    poolWaitP99Ms: health.poolWait?.p99 ?? null,
  };
}
