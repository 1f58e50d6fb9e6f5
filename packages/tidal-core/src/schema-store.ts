/**
 * The schema as part of the database: stored in `tidal_meta` at the first open, read when
 * `.schema()` is left out, compared with the given one at every other open. Additions are applied
 * with a warning; changes that drop or reinterpret stored data need `migrate({ allow })`.
 */
import type Database from 'better-sqlite3';
import {
  COMPATIBLE_SCHEMA_CHANGES,
  INCOMPATIBLE_SCHEMA_CHANGES,
  InternalError,
  InvalidInputError,
  SchemaChangeError,
  describeSchemaChange,
  type IncompatibleSchemaChange,
  type SchemaChange,
  type SchemaChangeKind,
  type WarningSink,
} from 'tidal-load';
import type { QuerySchema } from 'tidal-query';
import { META, type Meta } from 'tidal-wal/storage';
import { resolveSchema, type SchemaDefinition } from './schema.js';
import { checkDense, isPlainObject } from './validate.js';

/** Validates `migrate`; undefined allows nothing. */
export function resolveMigrate(m: unknown): ReadonlySet<IncompatibleSchemaChange> {
  if (m === undefined) return new Set();
  if (!isPlainObject(m)) throw new InvalidInputError('migrate', 'an object { allow: [...] }', m);
  for (const k of Object.keys(m)) if (k !== 'allow') throw new InvalidInputError(`migrate.${k}`, 'absent: migrate takes allow', m[k]);
  const allow = m.allow;
  if (!Array.isArray(allow)) throw new InvalidInputError('migrate.allow', 'an array of schema change kinds', allow);
  checkDense('migrate.allow', allow);
  allow.forEach((c: unknown, i) => {
    if (!(INCOMPATIBLE_SCHEMA_CHANGES as readonly unknown[]).includes(c)) {
      throw new InvalidInputError(`migrate.allow[${i}]`, `one of ${INCOMPATIBLE_SCHEMA_CHANGES.map((x) => `'${x}'`).join(', ')}`, c);
    }
  });
  return new Set(allow as IncompatibleSchemaChange[]);
}

/** A resolved schema as the definition that resolves to it, every default written out: what is stored. */
export function definitionOf(s: QuerySchema): SchemaDefinition {
  return {
    signals: s.kinds.map((k, i) => ({
      name: k.name,
      halfLifeMs: k.halfLifeMs,
      windows: [...k.windows],
      velocity: k.velocity,
      preference: s.preferenceRates?.[i] ?? 0,
    })),
    metadata: { ...s.metadata },
    ...(s.embeddingDims > 0 ? { embeddingDims: s.embeddingDims } : {}),
    ...(s.creatorField !== undefined ? { creatorField: s.creatorField } : {}),
    affinityHalfLifeMs: s.affinityHalfLifeMs,
  };
}

/** Every difference between `stored` and `given`, in schema order. */
export function diffSchemas(stored: QuerySchema, given: QuerySchema): SchemaChange[] {
  const out: SchemaChange[] = [];
  const add = (change: SchemaChangeKind, field: string, s: unknown, g: unknown): void => {
    out.push({ change, field, stored: s, given: g });
  };
  const givenKinds = new Map(given.kinds.map((k, i) => [k.name, { k, rate: given.preferenceRates?.[i] ?? 0 }]));
  const storedNames = new Set(stored.kinds.map((k) => k.name));
  stored.kinds.forEach((s, i) => {
    const at = `schema.signals.${s.name}`;
    const found = givenKinds.get(s.name);
    if (found === undefined) return add('kind-removed', at, s.name, undefined);
    const g = found.k;
    if (g.halfLifeMs !== s.halfLifeMs) add('half-life-changed', `${at}.halfLifeMs`, s.halfLifeMs, g.halfLifeMs);
    const removed = s.windows.filter((w) => !g.windows.includes(w));
    const added = g.windows.filter((w) => !s.windows.includes(w));
    if (removed.length > 0) add('window-removed', `${at}.windows`, s.windows, g.windows);
    else if (added.length > 0) add('window-added', `${at}.windows`, s.windows, g.windows);
    if (s.velocity !== g.velocity) add(g.velocity ? 'velocity-added' : 'velocity-removed', `${at}.velocity`, s.velocity, g.velocity);
    const rate = stored.preferenceRates?.[i] ?? 0;
    if (found.rate !== rate) add('preference-changed', `${at}.preference`, rate, found.rate);
  });
  for (const g of given.kinds) if (!storedNames.has(g.name)) add('kind-added', `schema.signals.${g.name}`, undefined, g.name);
  for (const [field, type] of Object.entries(stored.metadata)) {
    const g = Object.hasOwn(given.metadata, field) ? given.metadata[field] : undefined;
    if (g === undefined) add('field-removed', `schema.metadata.${field}`, type, undefined);
    else if (g !== type) add('field-type-changed', `schema.metadata.${field}`, type, g);
  }
  for (const [field, type] of Object.entries(given.metadata)) {
    if (!Object.hasOwn(stored.metadata, field)) add('field-added', `schema.metadata.${field}`, undefined, type);
  }
  if (stored.embeddingDims !== given.embeddingDims)
    add('embedding-dims-changed', 'schema.embeddingDims', stored.embeddingDims, given.embeddingDims);
  if (stored.creatorField !== given.creatorField) {
    const change = stored.creatorField === undefined ? 'creator-field-added' : 'creator-field-changed';
    add(change, 'schema.creatorField', stored.creatorField, given.creatorField);
  }
  if (stored.affinityHalfLifeMs !== given.affinityHalfLifeMs) {
    add('affinity-half-life-changed', 'schema.affinityHalfLifeMs', stored.affinityHalfLifeMs, given.affinityHalfLifeMs);
  }
  return out;
}

/** The schema an open runs with, and how to record it. */
export interface SchemaDecision {
  readonly schema: QuerySchema;
  /** What differs from the stored schema (all applied: the incompatible ones were allowed). */
  readonly changes: readonly SchemaChange[];
  /** Writes the schema to `tidal_meta`: call inside the transaction that writes the kind names. */
  readonly store: () => void;
  /** Raises `TIDAL_SCHEMA_CHANGED` for the changes, if any: call once they are committed. */
  readonly warn: () => void;
}

export interface SchemaDecisionDeps {
  readonly db: Database.Database;
  readonly meta: Meta;
  /** The schema given to `open()`, or null when `.schema()` was left out. */
  readonly given: QuerySchema | null;
  readonly allow: ReadonlySet<IncompatibleSchemaChange>;
  /** The database file, for messages. */
  readonly file: string;
  readonly onWarning: WarningSink;
}

/**
 * Decides the schema of an open from the stored one and the given one. Changes nothing on disk.
 * @throws InvalidInputError (`schema`) when neither exists, (`schema.embeddingDims`) for another
 * dimension than the stored embeddings'; SchemaChangeError for an incompatible change not allowed.
 */
export function decideSchema({ db, meta, given, allow, file, onWarning }: SchemaDecisionDeps): SchemaDecision {
  const stored = readStoredSchema(meta, file);
  const schema = given ?? stored;
  if (schema === null) {
    throw new InvalidInputError(
      'schema',
      `given with .schema({...}): ${file} has no stored schema yet (a new database, or one last opened by a version of tidal that did not store it)`,
      undefined,
    );
  }
  // Embeddings of another length cannot be read at all: no migration makes them valid.
  const storedDims = stored?.embeddingDims ?? meta.get(META.embeddingDims);
  if (storedDims !== undefined && storedDims !== schema.embeddingDims) {
    if (db.prepare('SELECT 1 FROM items WHERE embedding IS NOT NULL LIMIT 1').get()) {
      throw new InvalidInputError(
        'schema.embeddingDims',
        `${storedDims}, the dimension of the embeddings already stored`,
        schema.embeddingDims,
      );
    }
  }
  const changes = stored === null || given === null ? [] : diffSchemas(stored, given);
  const refused = changes.filter(
    (c) => !(COMPATIBLE_SCHEMA_CHANGES as readonly string[]).includes(c.change) && !allow.has(c.change as IncompatibleSchemaChange),
  );
  if (refused.length > 0) throw new SchemaChangeError(refused);
  return {
    schema,
    changes,
    store: () => {
      meta.set(META.schema, definitionOf(schema));
      meta.set(META.embeddingDims, schema.embeddingDims);
    },
    warn: () => {
      if (changes.length === 0) return;
      onWarning({
        code: 'TIDAL_SCHEMA_CHANGED',
        message: `The schema given to open() differs from the one ${file} stored; applied and stored: ${changes.map(describeSchemaChange).join('; ')}.`,
      });
    },
  };
}

function readStoredSchema(meta: Meta, file: string): QuerySchema | null {
  let def: unknown;
  try {
    def = meta.get(META.schema);
    if (def === undefined) return null;
    return resolveSchema(def);
  } catch (err) {
    throw new InternalError(`the schema stored in ${file} is unreadable (${(err as Error).message})`, { cause: err });
  }
}
