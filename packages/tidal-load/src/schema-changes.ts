/**
 * How the schema given to `open()` can differ from the one a database stored. Additions are applied
 * with a `TIDAL_SCHEMA_CHANGED` warning; every other change is refused with `SchemaChangeError`
 * unless `migrate({ allow })` names it. docs/api.md ("Schema changes") says what each one does.
 */

/** Changes applied on open with a warning: nothing stored is read differently. */
export const COMPATIBLE_SCHEMA_CHANGES = [
  /** A new signal kind: it starts with no signals. */
  'kind-added',
  /** A kind reports a window more (counts are kept for every window whatever the schema says). */
  'window-added',
  /** A kind turns `velocity` on. */
  'velocity-added',
  /** A new metadata field: stored items that already carry it become filterable by it. */
  'field-added',
  /** A `creatorField` where there was none. */
  'creator-field-added',
  /** `embeddingDims` changed while no item has an embedding. */
  'embedding-dims-changed',
] as const;

/** Changes that need the caller's consent: stored data is dropped or read differently. */
export const INCOMPATIBLE_SCHEMA_CHANGES = [
  /** A signal kind left out: its scores and counts are dropped. */
  'kind-removed',
  /** A kind's `halfLifeMs` changed: stored scores decay at the new rate from their last update. */
  'half-life-changed',
  /** A kind reports a window less. */
  'window-removed',
  /** A kind turns `velocity` off (it leaves `trending`). */
  'velocity-removed',
  /** A kind's `preference` rate changed: later signals move preferences by the new rate. */
  'preference-changed',
  /** A metadata field left out: filters and diversity can no longer name it. */
  'field-removed',
  /** A metadata field's type changed: stored values of the old type read as absent. */
  'field-type-changed',
  /** `creatorField` changed or left out: follows, blocks and affinities name creators by the new field. */
  'creator-field-changed',
  /** `affinityHalfLifeMs` changed: stored affinities decay at the new rate from their last update. */
  'affinity-half-life-changed',
] as const;

export type CompatibleSchemaChange = (typeof COMPATIBLE_SCHEMA_CHANGES)[number];
export type IncompatibleSchemaChange = (typeof INCOMPATIBLE_SCHEMA_CHANGES)[number];
export type SchemaChangeKind = CompatibleSchemaChange | IncompatibleSchemaChange;

/** One difference between the stored schema and the one given to `open()`. */
export interface SchemaChange {
  readonly change: SchemaChangeKind;
  /** The schema path, by kind name: `schema.signals.like.halfLifeMs`, `schema.metadata.category`. */
  readonly field: string;
  /** The stored value; undefined when the given schema adds it. */
  readonly stored: unknown;
  /** The given value; undefined when the given schema leaves it out. */
  readonly given: unknown;
}

/** `schema.signals.like.halfLifeMs 3600000 → 7200000 (half-life-changed)`. */
export function describeSchemaChange(c: SchemaChange): string {
  const show = (v: unknown): string => (v === undefined ? 'absent' : JSON.stringify(v));
  return `${c.field} ${show(c.stored)} → ${show(c.given)} (${c.change})`;
}
