import { BUCKETS_1H, BUCKETS_24H, BUCKETS_7D, UNIT_1H_MS, UNIT_24H_MS, UNIT_7D_MS } from './signals/layout.js';
import type { VelocityWindow } from './types.js';

const MS_PER_HOUR = 3_600_000;

/** The length of each velocity window. */
export const WINDOW_MS: Readonly<Record<VelocityWindow, number>> = Object.freeze({
  '1h': MS_PER_HOUR,
  '24h': 24 * MS_PER_HOUR,
  '7d': 168 * MS_PER_HOUR,
});

/**
 * The earliest time (ms) an event can have and still count in `window` at `nowMs`: the start of the
 * oldest of the window's ring buckets (`signals/layout.ts`).
 */
export function windowStartMs(window: VelocityWindow, nowMs: number): number {
  if (window === '1h') return (Math.floor(nowMs / UNIT_1H_MS) - BUCKETS_1H + 1) * UNIT_1H_MS;
  if (window === '24h') return (Math.floor(nowMs / UNIT_24H_MS) - BUCKETS_24H + 1) * UNIT_24H_MS;
  return (Math.floor(nowMs / UNIT_7D_MS) - BUCKETS_7D + 1) * UNIT_7D_MS;
}

/** The velocity window a plan reads: the task's own, or 24h with coarse windows (`plan.windows.coarse`). */
export function velocityWindowFor(window: VelocityWindow, coarse: boolean): VelocityWindow {
  return coarse ? '24h' : window;
}
