/**
 * Where a request's time goes on the thread that serves it, by stage: a measuring aid for
 * `bench:serve --stages`, off unless the environment has `TIDAL_STAGE_TIMES=1` (or `wall`) when
 * the process starts (its worker threads inherit it). Off, each stage costs one branch on a
 * constant; on, two readings per stage a request passes. With `1`, of the thread's CPU time
 * (`process.threadCpuUsage`, Node 23.9+, a getrusage call of about 1 µs), so a thread preempted
 * inside a stage does not bill the wait to it; but the figure moves in steps (at the kernel's tick
 * and its scheduling events), and measured on loopback most of a request's time landed in the
 * write that wakes the client. With `wall`, or where that call is
 * missing (Node 20, 22), the readings are `performance.now()`: exact, but wall time, waits for a
 * CPU included (`bench:serve --stages` uses it, and scales by the threads' running share).
 * {@link STAGE_CLOCK} says which.
 *
 * Each thread keeps its own totals (module state is per thread); tidal serve sums them into
 * `/stats` (`stages`).
 */
import { performance } from 'node:perf_hooks';

/** The stages, in the order a query passes them. */
export const STAGES = ['admission', 'plan', 'executor', 'hydration', 'json', 'write'] as const;
export type Stage = (typeof STAGES)[number];

/** Each stage's index into {@link stageTotals}. */
export const STAGE: { readonly [S in Stage]: number } = Object.freeze({
  admission: 0,
  plan: 1,
  executor: 2,
  hydration: 3,
  json: 4,
  write: 5,
});

/** Whether this process measures its stages (`TIDAL_STAGE_TIMES=1` at start). */
const SETTING = typeof process !== 'undefined' ? process.env?.TIDAL_STAGE_TIMES : undefined;
export const STAGE_TIMES_ON: boolean = SETTING === '1' || SETTING === 'wall';

const totalsMs = new Float64Array(STAGES.length);

const threadCpuUsage = (process as { threadCpuUsage?: () => { user: number; system: number } }).threadCpuUsage;

/** What the stage times measure: this thread's CPU time, or wall time where Node cannot say. */
export const STAGE_CLOCK: 'thread-cpu' | 'wall' = typeof threadCpuUsage === 'function' && SETTING !== 'wall' ? 'thread-cpu' : 'wall';

/** This thread's CPU time in ms (or the wall clock, see {@link STAGE_CLOCK}). */
const now: () => number =
  STAGE_CLOCK === 'thread-cpu' && threadCpuUsage !== undefined
    ? () => {
        const u = threadCpuUsage.call(process);
        return (u.user + u.system) / 1000;
      }
    : () => performance.now();

/** A reading to pass to {@link stageEnd} when measuring, else 0. */
export function stageStart(): number {
  return STAGE_TIMES_ON ? now() : 0;
}

/** Adds the time since `started` (from {@link stageStart}) to `stage`'s total on this thread. */
export function stageEnd(stage: number, started: number): void {
  if (STAGE_TIMES_ON) totalsMs[stage]! += now() - started;
}

/** Adds `ms` measured elsewhere to `stage` (a part to take out of a stage that contains it: negative). */
export function stageAdd(stage: number, ms: number): void {
  if (STAGE_TIMES_ON) totalsMs[stage]! += ms;
}

/** This thread's total so far for one stage, in ms. */
export function stageTotal(stage: number): number {
  return totalsMs[stage]!;
}

/** This thread's totals so far, in ms, by stage (a copy). */
export function stageTotals(): Record<Stage, number> {
  const out = {} as Record<Stage, number>;
  STAGES.forEach((s, i) => (out[s] = totalsMs[i]!));
  return out;
}
