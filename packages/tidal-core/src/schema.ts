import { InvalidInputError, type IncompatibleSchemaChange } from 'tidal-load';
import type { FieldType, QuerySchema, SignalKindSpec, WindowName } from 'tidal-query';
import { checkDense, isPlainObject } from './validate.js';

export const WINDOWS: readonly WindowName[] = Object.freeze(['1h', '24h', '7d', 'all']);
const isWindow = (w: unknown): w is WindowName => (WINDOWS as readonly unknown[]).includes(w);

/** One kind of engagement signal. */
export interface SignalKindDefinition {
  /** The name signals are written with: letters, digits, `_` and `-`, starting with a letter. */
  name: string;
  /** Half-life of the exponentially decayed score, in milliseconds. */
  halfLifeMs: number;
  /**
   * Windowed counts reported for this kind.
   * @default ['1h', '24h', '7d', 'all']
   */
  windows?: readonly WindowName[];
  /**
   * Report velocity (windowed count / window seconds) and use the kind in the `trending` profile.
   * @default false
   */
  velocity?: boolean;
  /**
   * How a user's signal of this kind moves their preference vector: a rate from −1 to 1. Positive:
   * an exponential moving average toward the item's embedding (`p ← (1 − r)·p + r·ê`, ê the unit
   * embedding); negative: away from it (`p ← (1 − |r|)·p − |r|·ê`); 0 leaves it alone. Kinds with
   * a rate also move the user's affinity to the item's creator, by +weight (positive) or −weight
   * (negative).
   * @default 0
   */
  preference?: number;
}

/** What a database holds, declared up front. */
export interface SchemaDefinition {
  signals: readonly SignalKindDefinition[];
  /** Metadata fields that filters and diversity can use, with their types. Other fields are stored as given. */
  metadata?: Readonly<Record<string, FieldType>>;
  /** Length of item embeddings; omit for a database without vectors. */
  embeddingDims?: number;
  /**
   * The item metadata field naming an item's creator: a field declared `'string'` in `metadata`.
   * Blocks, follows, creator affinity and `for_you`'s exploration read it.
   */
  creatorField?: string;
  /**
   * Half-life of a user's creator affinities, in milliseconds (decayed as signal scores are).
   * @default 604 800 000 (7 days)
   */
  affinityHalfLifeMs?: number;
}

/** What `migrate()` takes: the incompatible schema changes an open may apply. */
export interface MigrateOptions {
  /**
   * The changes to apply, by kind (`'kind-removed'`, `'half-life-changed'`, ...): the ones a
   * `SchemaChangeError` lists. A change not named here is still refused.
   */
  allow: readonly IncompatibleSchemaChange[];
}

/** Default half-life of creator affinities: a week. */
export const AFFINITY_HALF_LIFE_MS = 7 * 86_400_000;

const NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
/** Names the query language uses for itself. */
const RESERVED_FIELDS = new Set(['createdAt', 'id']);
export const MAX_EMBEDDING_DIMS = 4096;

const SCHEMA_KEYS = ['signals', 'metadata', 'embeddingDims', 'creatorField', 'affinityHalfLifeMs'];
const KIND_KEYS = ['name', 'halfLifeMs', 'windows', 'velocity', 'preference'];

/** Refuses a key `keys` does not list: a misspelt one would otherwise be silently ignored. */
function checkKeys(at: string, o: Record<string, unknown>, keys: readonly string[]): void {
  for (const k of Object.keys(o)) {
    if (!keys.includes(k)) throw new InvalidInputError(`${at}.${k}`, `absent: ${at} takes ${keys.join(', ')}`, o[k]);
  }
}

/** Validates a schema; every problem is an {@link InvalidInputError} naming the field. */
export function resolveSchema(def: unknown): QuerySchema {
  if (!isPlainObject(def)) throw new InvalidInputError('schema', 'an object with a signals array', def);
  checkKeys('schema', def, SCHEMA_KEYS);
  const d = def as Partial<SchemaDefinition>;
  if (!Array.isArray(d.signals) || d.signals.length === 0) {
    throw new InvalidInputError('schema.signals', 'a non-empty array of signal kinds', d.signals);
  }
  if (d.signals.length > 64) throw new InvalidInputError('schema.signals', 'at most 64 signal kinds', d.signals);
  checkDense('schema.signals', d.signals);
  const seen = new Set<string>();
  const preferenceRates: number[] = [];
  const kinds: SignalKindSpec[] = d.signals.map((k: SignalKindDefinition, i: number) => {
    const at = `schema.signals[${i}]`;
    if (!isPlainObject(k)) throw new InvalidInputError(at, 'an object', k);
    checkKeys(at, k, KIND_KEYS);
    if (typeof k.name !== 'string' || !NAME.test(k.name)) {
      throw new InvalidInputError(`${at}.name`, 'a name of letters, digits, _ or -, starting with a letter, at most 64 characters', k.name);
    }
    if (seen.has(k.name)) throw new InvalidInputError(`${at}.name`, 'unique among signal kinds (it is declared twice)', k.name);
    seen.add(k.name);
    if (typeof k.halfLifeMs !== 'number' || !Number.isFinite(k.halfLifeMs) || k.halfLifeMs <= 0) {
      throw new InvalidInputError(`${at}.halfLifeMs`, 'a positive finite number of milliseconds', k.halfLifeMs);
    }
    // Only an absent key means the default: `null` is refused like any other non-array.
    const given: unknown = k.windows === undefined ? WINDOWS : k.windows;
    if (!Array.isArray(given)) throw new InvalidInputError(`${at}.windows`, `an array of ${WINDOWS.join(', ')}`, given);
    checkDense(`${at}.windows`, given);
    const windows: WindowName[] = [];
    for (const w of given as unknown[]) {
      if (!isWindow(w)) throw new InvalidInputError(`${at}.windows`, `made of ${WINDOWS.map((x) => `'${x}'`).join(', ')}`, w);
      windows.push(w);
    }
    if (new Set(windows).size !== windows.length) throw new InvalidInputError(`${at}.windows`, 'without duplicates', windows);
    const velocity = k.velocity === undefined ? false : k.velocity;
    if (typeof velocity !== 'boolean') throw new InvalidInputError(`${at}.velocity`, 'a boolean', velocity);
    if (velocity && !windows.some((w) => w !== 'all')) {
      throw new InvalidInputError(`${at}.windows`, "to include '1h', '24h' or '7d' when velocity is true", windows);
    }
    const preference = k.preference === undefined ? 0 : k.preference;
    if (typeof preference !== 'number' || !(preference >= -1 && preference <= 1)) {
      throw new InvalidInputError(`${at}.preference`, 'a number from -1 to 1', preference);
    }
    preferenceRates.push(preference);
    return Object.freeze({ name: k.name, halfLifeMs: k.halfLifeMs, windows: Object.freeze([...windows]), velocity });
  });

  const metadata: Record<string, FieldType> = {};
  if (d.metadata !== undefined) {
    if (!isPlainObject(d.metadata)) {
      throw new InvalidInputError('schema.metadata', "an object of field names to 'string' or 'number'", d.metadata);
    }
    for (const [field, type] of Object.entries(d.metadata)) {
      if (!NAME.test(field) || RESERVED_FIELDS.has(field)) {
        throw new InvalidInputError('schema.metadata', 'field names of letters, digits, _ or -, other than createdAt and id', field);
      }
      if (type !== 'string' && type !== 'number') throw new InvalidInputError(`schema.metadata.${field}`, "'string' or 'number'", type);
      metadata[field] = type;
    }
  }

  let embeddingDims = 0;
  if (d.embeddingDims !== undefined) {
    if (
      typeof d.embeddingDims !== 'number' ||
      !Number.isInteger(d.embeddingDims) ||
      d.embeddingDims < 1 ||
      d.embeddingDims > MAX_EMBEDDING_DIMS
    ) {
      throw new InvalidInputError('schema.embeddingDims', `a whole number from 1 to ${MAX_EMBEDDING_DIMS}`, d.embeddingDims);
    }
    embeddingDims = d.embeddingDims;
  }
  const out: { -readonly [K in keyof QuerySchema]: QuerySchema[K] } = {
    kinds: Object.freeze(kinds),
    metadata: Object.freeze(metadata),
    embeddingDims,
    preferenceRates: Object.freeze(preferenceRates),
    affinityHalfLifeMs: AFFINITY_HALF_LIFE_MS,
  };
  if (d.creatorField !== undefined) {
    if (typeof d.creatorField !== 'string' || metadata[d.creatorField] !== 'string' || !Object.hasOwn(metadata, d.creatorField)) {
      const strings = Object.keys(metadata).filter((f) => metadata[f] === 'string');
      throw new InvalidInputError(
        'schema.creatorField',
        `a metadata field declared 'string' (${strings.join(', ') || 'none declared'})`,
        d.creatorField,
      );
    }
    out.creatorField = d.creatorField;
  }
  if (d.affinityHalfLifeMs !== undefined) {
    if (typeof d.affinityHalfLifeMs !== 'number' || !Number.isFinite(d.affinityHalfLifeMs) || d.affinityHalfLifeMs <= 0) {
      throw new InvalidInputError('schema.affinityHalfLifeMs', 'a positive finite number of milliseconds', d.affinityHalfLifeMs);
    }
    out.affinityHalfLifeMs = d.affinityHalfLifeMs;
  }
  return Object.freeze(out);
}
