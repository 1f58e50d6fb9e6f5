import { DegradationLevel } from 'tidal-load';

/**
 * Why a query ran at its level, the reason that made it cheapest:
 * - `'load'`: the in-flight count alone gave this level;
 * - `'criticality'`: a sheddable query, degraded as if twice as many queries were in flight;
 * - `'requested'`: the caller's `level` option asked for no better than this;
 * - `'deadline'`: the caller's `timeoutMs` left too little time for a better level.
 * When two reasons give the same level, the earlier in this list is named.
 */
export type LevelReason = 'load' | 'criticality' | 'requested' | 'deadline';

export interface LevelInputs {
  /** The level the in-flight count gives (the guard's `loadLevel`). */
  readonly loadLevel: DegradationLevel;
  /** The level the load gives this query's criticality (the guard's `level`; ≥ loadLevel). */
  readonly criticalityLevel: DegradationLevel;
  /** The caller's `level` option, or null. */
  readonly requested: DegradationLevel | null;
  /** Milliseconds the caller will still wait, or null without a deadline. */
  readonly remainingMs: number | null;
  /** Estimated wait for a worker, in ms: the queries ahead × the mean service time ÷ workers. */
  readonly queueMs: number;
  /** Estimated worker time at a level, in ms. */
  readonly serviceMs: (level: DegradationLevel) => number;
  /** `false` (load management off): only the caller's request can degrade the query. */
  readonly loadManagement: boolean;
}

/**
 * The query's level: the cheapest of what the load, the criticality, the caller's request and the
 * deadline each allow, so a request or a deadline can only ever make a query cheaper than the load
 * would, never better. The deadline rule: the best level, no better than the others allow, whose
 * estimated queueing plus service time fits in the remaining budget; when none fits, the cheapest
 * (it has the best chance).
 */
export function chooseLevel(i: LevelInputs): { level: DegradationLevel; reason: LevelReason } {
  let level: DegradationLevel = i.loadManagement ? i.loadLevel : DegradationLevel.Full;
  let reason: LevelReason = 'load';
  if (i.loadManagement && i.criticalityLevel > level) {
    level = i.criticalityLevel;
    reason = 'criticality';
  }
  if (i.requested !== null && i.requested > level) {
    level = i.requested;
    reason = 'requested';
  }
  if (i.loadManagement && i.remainingMs !== null) {
    let fit = level;
    while (fit < DegradationLevel.NoDiversity && i.queueMs + i.serviceMs(fit) > i.remainingMs) fit = (fit + 1) as DegradationLevel;
    if (fit > level) {
      level = fit;
      reason = 'deadline';
    }
  }
  return { level, reason };
}
