import { InvalidInputError } from './errors.js';

/**
 * Degradation levels, ordered from best quality to cheapest. A level is a small integer so that
 * comparing two levels is one integer compare and a level fits in a SharedArrayBuffer slot. Frozen:
 * every copy of the package must agree on the numbers, so no caller may reassign one.
 */
const NUMBERS = {
  Full: 0,
  ReducedCandidates: 1,
  CoarseAggregates: 2,
  NoDiversity: 3,
} as const;

/**
 * The levels by name and, as a TypeScript numeric enum has, the names by level:
 * `DegradationLevel[res.degradationLevel]` is `'Full'` (or {@link levelName}).
 */
export const DegradationLevel = Object.freeze({
  ...NUMBERS,
  0: 'Full',
  1: 'ReducedCandidates',
  2: 'CoarseAggregates',
  3: 'NoDiversity',
} as const);

export type DegradationLevel = (typeof NUMBERS)[keyof typeof NUMBERS];

const NAMES = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const;
export type DegradationLevelName = (typeof NAMES)[number];

/** The level's name, as it appears in logs, metrics and JSON. */
export function levelName(level: DegradationLevel): DegradationLevelName {
  return NAMES[level];
}

export function isDegradationLevel(value: unknown): value is DegradationLevel {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value < NAMES.length;
}

/** The level named or numbered by `value`, or undefined when it is neither. */
function asLevel(value: unknown): DegradationLevel | undefined {
  if (isDegradationLevel(value)) return value;
  if (typeof value !== 'string') return undefined;
  const i = (NAMES as readonly string[]).indexOf(value);
  return i < 0 ? undefined : (i as DegradationLevel);
}

/**
 * Validates a level given by a caller: a {@link DegradationLevel} (0–3) or its name
 * (`'Full'`, `'ReducedCandidates'`, `'CoarseAggregates'`, `'NoDiversity'`).
 * @throws {@link InvalidInputError} naming `field` and the value.
 */
export function checkLevel(value: unknown, field = 'level'): DegradationLevel {
  const level = asLevel(value);
  if (level === undefined) {
    throw new InvalidInputError(
      field,
      `a DegradationLevel (0 to ${NAMES.length - 1}) or its name (${NAMES.map((n) => `'${n}'`).join(', ')})`,
      value,
    );
  }
  return level;
}

// What each level does (the plan every executor reads) is tidal-query's `LevelPlan` (plan.ts).
