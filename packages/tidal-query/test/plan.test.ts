import { describe, expect, it } from 'vitest';
import { DegradationLevel, levelName } from 'tidal-load';
import {
  FOR_YOU_BUDGETS,
  FOR_YOU_GROWTH_LIMIT_ITEMS,
  FOR_YOU_REFERENCE_ITEMS,
  LEVEL_PLANS,
  forYouBudgetAt,
  levelPlan,
  tunedPlan,
  type LevelPlan,
} from '../src/plan.js';

const LEVELS = [DegradationLevel.Full, DegradationLevel.ReducedCandidates, DegradationLevel.CoarseAggregates, DegradationLevel.NoDiversity];

/**
 * Which value of each switch is the cheaper one. A switch the plan gains must be added here, so
 * the monotonicity test below knows which way it cuts.
 */
const CHEAPER_WHEN: Readonly<Record<string, boolean>> = {
  'context.popularStandIn': true,
  'context.fillBall': true,
  'windows.coarse': true,
  'windows.reuse': true,
  'diversity.enabled': false,
  'forYou.popularNeighbours': true,
  'forYou.reuseNeighbours': true,
};

/** Every leaf of a plan, by its dotted path. */
function leaves(plan: LevelPlan): Map<string, unknown> {
  const out = new Map<string, unknown>();
  for (const [part, fields] of Object.entries(plan)) {
    for (const [field, value] of Object.entries(fields as object)) out.set(`${part}.${field}`, value);
  }
  return out;
}

/** Every object reachable from `value`, itself included. */
function objects(value: unknown): object[] {
  if (typeof value !== 'object' || value === null) return [];
  return [value, ...Object.values(value).flatMap(objects)];
}

describe('the level plan', () => {
  it('has one plan per level, each frozen all the way down', () => {
    expect(LEVEL_PLANS.length).toBe(LEVELS.length);
    for (const level of LEVELS) {
      const plan = levelPlan(level);
      expect(plan, levelName(level)).toBe(LEVEL_PLANS[level]);
      const all = objects(plan);
      expect(all.length).toBeGreaterThan(Object.keys(plan).length);
      for (const o of all) expect(Object.isFrozen(o), levelName(level)).toBe(true);
      // ESM runs in strict mode: writing a frozen field throws.
      expect(() => {
        (plan.ann as { topK: number }).topK = 1;
      }).toThrow(TypeError);
    }
    expect(Object.isFrozen(LEVEL_PLANS)).toBe(true);
    for (const o of objects(FOR_YOU_BUDGETS)) expect(Object.isFrozen(o)).toBe(true);
  });

  it('makes each level cheaper than or as cheap as the one above it, in every budget and switch', () => {
    for (let l = 1; l < LEVELS.length; l++) {
      const above = leaves(levelPlan(LEVELS[l - 1]!));
      const here = leaves(levelPlan(LEVELS[l]!));
      expect([...here.keys()]).toEqual([...above.keys()]);
      for (const [path, value] of here) {
        const where = `${levelName(LEVELS[l]!)} ${path}`;
        const prev = above.get(path);
        if (typeof value === 'number') {
          expect(value, where).toBeLessThanOrEqual(prev as number);
        } else if (typeof value === 'boolean') {
          expect(CHEAPER_WHEN, `${path}: a switch the test does not know`).toHaveProperty([path]);
          // Once a level takes the cheaper side of a switch, no level below goes back.
          if (prev === CHEAPER_WHEN[path]) expect(value, where).toBe(prev);
        } else {
          throw new Error(`${where}: a plan field that is neither a number nor a switch`);
        }
      }
    }
  });

  it("makes each level's for_you budgets, grown for the catalogue, cheaper than or as cheap as the one above at every size", () => {
    for (const items of [0, 1_000, FOR_YOU_REFERENCE_ITEMS, 250_000, 500_000, FOR_YOU_GROWTH_LIMIT_ITEMS, 10_000_000]) {
      for (let l = 1; l < LEVELS.length; l++) {
        const above = forYouBudgetAt(levelPlan(LEVELS[l - 1]!).forYou, items);
        const here = forYouBudgetAt(levelPlan(LEVELS[l]!).forYou, items);
        for (const [field, value] of Object.entries(here)) {
          // The switches are the test above's.
          if (typeof value === 'boolean') continue;
          expect(value, `${levelName(LEVELS[l]!)} forYou.${field} at ${items} items`).toBeLessThanOrEqual(
            above[field as keyof typeof above] as number,
          );
        }
        // What the creators source may take at most: each creator's depth is at most perCreator.
        expect(here.creators * here.perCreator, `${levelName(LEVELS[l]!)} at ${items} items`).toBeLessThan(
          above.creators * above.perCreator,
        );
      }
    }
  });

  it('grows the for_you depths with the catalogue between the reference and the limit, and holds them outside', () => {
    for (const level of LEVELS) {
      const plan = levelPlan(level).forYou;
      const at = (items: number) => forYouBudgetAt(plan, items);
      expect(at(1_000)).toEqual(plan);
      expect(at(FOR_YOU_REFERENCE_ITEMS)).toEqual(plan);
      expect(at(10_000_000)).toEqual(at(FOR_YOU_GROWTH_LIMIT_ITEMS));
      const x = FOR_YOU_GROWTH_LIMIT_ITEMS / FOR_YOU_REFERENCE_ITEMS;
      expect(at(FOR_YOU_GROWTH_LIMIT_ITEMS).perCreator).toBe(Math.round(plan.perCreator * x ** plan.perCreatorGrowth));
      expect(at(FOR_YOU_GROWTH_LIMIT_ITEMS).newest).toBe(Math.round(plan.newest * x ** plan.newestGrowth));
      // The sources whose depth does not reach back in time stay as the plan gives them.
      for (const k of ['ann', 'annWithAffinity', 'creators', 'trending', 'trendingSlots', 'coldStart'] as const)
        expect(at(FOR_YOU_GROWTH_LIMIT_ITEMS)[k]).toBe(plan[k]);
      // Growth is monotone in the catalogue.
      let prev = at(FOR_YOU_REFERENCE_ITEMS);
      for (const items of [200_000, 400_000, 700_000, FOR_YOU_GROWTH_LIMIT_ITEMS]) {
        const next = at(items);
        expect(next.perCreator).toBeGreaterThanOrEqual(prev.perCreator);
        expect(next.newest).toBeGreaterThanOrEqual(prev.newest);
        prev = next;
      }
    }
    // Full's creator depth grows at a million items (the sweep that chose it: BENCHMARKS.md#personalization).
    expect(forYouBudgetAt(levelPlan(DegradationLevel.Full).forYou, FOR_YOU_GROWTH_LIMIT_ITEMS).perCreator).toBeGreaterThan(
      levelPlan(DegradationLevel.Full).forYou.perCreator,
    );
  });

  it('cuts something at every level: no level is a copy of the one above', () => {
    for (let l = 1; l < LEVELS.length; l++) expect(levelPlan(LEVELS[l]!)).not.toEqual(levelPlan(LEVELS[l - 1]!));
  });

  it('tunes a copy, frozen like the plans, and leaves the plan it started from alone', () => {
    const base = levelPlan(DegradationLevel.ReducedCandidates);
    const before = JSON.stringify(base);
    const tuned = tunedPlan(base, { trending: { slots: 7 } });
    expect(tuned.trending.slots).toBe(7);
    expect(JSON.stringify(base)).toBe(before);
    expect({ ...tuned, trending: base.trending }).toEqual(base);
    for (const o of objects(tuned)) expect(Object.isFrozen(o)).toBe(true);
  });
});
