import type { DegradationLevel } from 'tidal-load';
import { levelPlan, tunedPlan, type LevelPlan, type PlanOverrides } from '../src/plan.js';

interface PlanExecutor<T, R> {
  run(task: T, plan: LevelPlan, nowMs: number, picked?: number[]): R;
}

/** An executor run at a level: by that level's plan, with `tune`'s overrides when given (the worker's own mapping). */
export interface LevelRunner<T, R> {
  run(task: T, level: DegradationLevel, nowMs: number, picked?: number[]): R;
}

export function atLevels<T, R>(exec: PlanExecutor<T, R>, tune?: (level: DegradationLevel) => PlanOverrides): LevelRunner<T, R> {
  const plan = (level: DegradationLevel): LevelPlan => (tune ? tunedPlan(levelPlan(level), tune(level)) : levelPlan(level));
  return { run: (task, level, nowMs, picked) => exec.run(task, plan(level), nowMs, picked) };
}
