import type { VelocityWindow } from './types.js';

const MS_PER_MINUTE = 60_000;
const MS_PER_HOUR = 3_600_000;

/** The length of each velocity window. */
export const WINDOW_MS: Readonly<Record<VelocityWindow, number>> = Object.freeze({
  '1h': MS_PER_HOUR,
  '24h': 24 * MS_PER_HOUR,
  '7d': 168 * MS_PER_HOUR,
});

/** The earliest time (ms) an event can have and still count in `window` at `nowMs` (ring units). */
export function windowStartMs(window: VelocityWindow, nowMs: number): number {
  if (window === '1h') return (Math.floor(nowMs / MS_PER_MINUTE) - 59) * MS_PER_MINUTE;
  return (Math.floor(nowMs / MS_PER_HOUR) - (window === '24h' ? 23 : 167)) * MS_PER_HOUR;
}

/** The velocity window a plan reads: the task's own, or 24h with coarse windows (`plan.windows.coarse`). */
export function velocityWindowFor(window: VelocityWindow, coarse: boolean): VelocityWindow {
  return coarse ? '24h' : window;
}
