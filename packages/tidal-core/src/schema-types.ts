/**
 * Types computed from a schema, as `TidalDb<S>` uses them: the builder infers `S` from the object
 * literal given to `.schema(...)`, so a kind, a metadata field or a filter key the schema does not
 * declare fails to compile. With the default `S` (`SchemaDefinition`, what a schema typed as such or
 * a reopen without `.schema()` gives) every type is as loose as the run-time checks.
 */
import type { FieldCondition, FieldType } from 'tidal-query';
import type { SchemaDefinition } from './schema.js';

/** The signal kind names of `S`: a union of literals, or `string` when `S` does not spell them. */
export type KindOf<S extends SchemaDefinition> = S['signals'][number]['name'];

/** No field at all: the metadata of a schema that declares none. */
type NoFields = Record<never, FieldType>;

/** The declared metadata fields of `S` with their types ({@link NoFields} for a schema without metadata). */
export type FieldsOf<S extends SchemaDefinition> = S extends { metadata?: infer M }
  ? M extends Readonly<Record<string, FieldType>>
    ? M
    : NoFields
  : NoFields;

/** Whether `S` names its fields (a literal schema) rather than any string (`SchemaDefinition`). */
type Loose<F> = string extends keyof F ? true : false;

/** The value a metadata field of type `T` holds. */
export type FieldValue<T extends FieldType> = T extends 'number' ? number : string;

/**
 * An item's metadata under `S`: each declared field with its type (or null), and no other field.
 * With a loose `S`: any JSON object.
 */
export type MetadataOf<S extends SchemaDefinition> =
  Loose<FieldsOf<S>> extends true ? Record<string, unknown> : { [K in keyof FieldsOf<S>]?: FieldValue<FieldsOf<S>[K]> | null };

/** A filter under `S`: conditions on its declared fields and `createdAt`. */
export type FilterOf<S extends SchemaDefinition> =
  Loose<FieldsOf<S>> extends true
    ? Readonly<Record<string, FieldCondition>>
    : { readonly [K in keyof FieldsOf<S> | 'createdAt']?: FieldCondition };

/** A diversity cap under `S`: at most `maxPer[field]` results share one value of a declared field. */
export interface DiversityOf<S extends SchemaDefinition> {
  maxPer: Loose<FieldsOf<S>> extends true ? Readonly<Record<string, number>> : { readonly [K in keyof FieldsOf<S>]?: number };
}
