import { InvalidInputError } from 'tidal-load';
import { MAX_EVENT_MS, type Diversity, type FieldCondition, type Filter, type Profile, type QuerySchema, type RangeCondition, type VelocityWindow } from 'tidal-query';

export const MAX_ID_LENGTH = 512;
export const MAX_TEXT_LENGTH = 100_000;
export const MAX_METADATA_BYTES = 64 * 1024;
export const MAX_LIMIT = 1000;
export const MAX_BATCH = 100_000;
const MAX_IN_VALUES = 1000;

export function checkId(field: string, id: unknown): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_LENGTH) {
    throw new InvalidInputError(field, `a non-empty string of at most ${MAX_ID_LENGTH} characters`, id);
  }
  return id;
}

/** Timestamps are milliseconds since the epoch, from 0 up to (not including) {@link MAX_EVENT_MS}. */
export function checkTime(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value >= MAX_EVENT_MS) {
    throw new InvalidInputError(field, `a timestamp in milliseconds since the epoch, from 0 to below ${MAX_EVENT_MS} (year 6053)`, value);
  }
  return value;
}

export function checkLimit(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_LIMIT) {
    throw new InvalidInputError(field, `a whole number from 1 to ${MAX_LIMIT}`, value);
  }
  return value;
}

export function checkBatch(field: string, value: unknown): unknown[] {
  if (!Array.isArray(value) || value.length > MAX_BATCH) {
    throw new InvalidInputError(field, `an array of at most ${MAX_BATCH} entries`, value);
  }
  return value;
}

/** A vector of the schema's dimension, finite and not all zero, copied into a Float32Array. */
export function checkVector(field: string, value: unknown, dims: number): Float32Array {
  if (dims === 0) throw new InvalidInputError(field, 'absent: the schema declares no embeddingDims', value);
  const isArray = Array.isArray(value) || value instanceof Float32Array || value instanceof Float64Array;
  if (!isArray || (value as ArrayLike<number>).length !== dims) {
    throw new InvalidInputError(field, `an array or Float32Array of ${dims} numbers (schema.embeddingDims)`, value);
  }
  const src = value as ArrayLike<number>;
  const out = new Float32Array(dims);
  let nonZero = false;
  for (let i = 0; i < dims; i++) {
    const x = src[i];
    if (typeof x !== 'number' || !Number.isFinite(x)) throw new InvalidInputError(`${field}[${i}]`, 'a finite number', x);
    out[i] = x;
    if (x !== 0) nonZero = true;
  }
  if (!nonZero) throw new InvalidInputError(field, 'a vector with at least one non-zero component (cosine needs a direction)', value);
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !ArrayBuffer.isView(v);
}

export function checkFilter(value: unknown, schema: QuerySchema, field = 'filter'): Filter | null {
  if (value === undefined || value === null) return null;
  if (!isPlainObject(value)) throw new InvalidInputError(field, 'an object of field conditions', value);
  const out: Record<string, FieldCondition> = {};
  for (const [name, cond] of Object.entries(value)) {
    const at = `${field}.${name}`;
    const type = name === 'createdAt' ? 'number' : schema.metadata[name];
    if (type === undefined) {
      const known = ['createdAt', ...Object.keys(schema.metadata)].join(', ');
      throw new InvalidInputError(at, `a field declared in schema.metadata (${known})`, name);
    }
    out[name] = checkCondition(at, cond, type);
  }
  return Object.keys(out).length === 0 ? null : out;
}

function checkCondition(at: string, cond: unknown, type: 'string' | 'number'): FieldCondition {
  const scalar = (where: string, v: unknown): string | number => {
    if (type === 'string' && typeof v === 'string') return v;
    if (type === 'number' && typeof v === 'number' && Number.isFinite(v)) return v;
    throw new InvalidInputError(where, type === 'string' ? 'a string' : 'a finite number', v);
  };
  if (!isPlainObject(cond)) return scalar(at, cond);
  if ('in' in cond) {
    const list = cond.in;
    if (!Array.isArray(list) || list.length === 0 || list.length > MAX_IN_VALUES || Object.keys(cond).length !== 1) {
      throw new InvalidInputError(`${at}.in`, `a non-empty array of at most ${MAX_IN_VALUES} values (and no other key)`, list);
    }
    return { in: list.map((v, i) => scalar(`${at}.in[${i}]`, v)) };
  }
  if (type === 'string') throw new InvalidInputError(at, 'a string or { in: [...] }', cond);
  const range: RangeCondition = {};
  const keys = Object.keys(cond);
  if (keys.length === 0) throw new InvalidInputError(at, 'a number, { in: [...] } or a range with gt, gte, lt or lte', cond);
  for (const k of keys) {
    if (k !== 'gt' && k !== 'gte' && k !== 'lt' && k !== 'lte') {
      throw new InvalidInputError(`${at}.${k}`, 'one of gt, gte, lt, lte, in', k);
    }
    range[k] = scalar(`${at}.${k}`, cond[k]) as number;
  }
  return range;
}

export function checkDiversity(value: unknown, schema: QuerySchema): Diversity | null {
  if (value === undefined || value === null) return null;
  if (!isPlainObject(value) || !isPlainObject(value.maxPer) || Object.keys(value.maxPer).length === 0) {
    throw new InvalidInputError('diversity', 'an object { maxPer: { field: n } } with at least one field', value);
  }
  const maxPer: Record<string, number> = {};
  for (const [name, n] of Object.entries(value.maxPer)) {
    if (schema.metadata[name] === undefined) {
      throw new InvalidInputError(`diversity.maxPer.${name}`, `a field declared in schema.metadata (${Object.keys(schema.metadata).join(', ')})`, name);
    }
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) {
      throw new InvalidInputError(`diversity.maxPer.${name}`, 'a whole number of at least 1', n);
    }
    maxPer[name] = n;
  }
  return { maxPer };
}

export const PROFILES: readonly Profile[] = Object.freeze(['trending', 'popular', 'new']);
export const VELOCITY_WINDOWS: readonly VelocityWindow[] = Object.freeze(['1h', '24h', '7d']);

export function checkProfile(value: unknown, schema: QuerySchema): Profile {
  if (typeof value !== 'string' || !(PROFILES as readonly string[]).includes(value)) {
    throw new InvalidInputError('profile', `one of ${PROFILES.map((p) => `'${p}'`).join(', ')}`, value);
  }
  if (value === 'trending' && !schema.kinds.some((k) => k.velocity)) {
    throw new InvalidInputError('profile', "a profile the schema supports ('trending' needs a signal kind with velocity: true)", value);
  }
  return value as Profile;
}

/** The default velocity window: the shortest one any velocity kind declares. */
export function defaultWindow(schema: QuerySchema): VelocityWindow {
  for (const w of VELOCITY_WINDOWS) if (schema.kinds.some((k) => k.velocity && k.windows.includes(w))) return w;
  return '1h';
}

export function checkWindow(value: unknown, fallback: VelocityWindow): VelocityWindow {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !(VELOCITY_WINDOWS as readonly string[]).includes(value)) {
    throw new InvalidInputError('window', `one of ${VELOCITY_WINDOWS.map((w) => `'${w}'`).join(', ')}`, value);
  }
  return value as VelocityWindow;
}

export function checkMetadata(field: string, value: unknown, schema: QuerySchema): Record<string, unknown> {
  if (value === undefined) return {};
  if (!isPlainObject(value)) throw new InvalidInputError(field, 'a plain object', value);
  for (const [name, type] of Object.entries(schema.metadata)) {
    const v = value[name];
    if (v === undefined || v === null) continue;
    if (type === 'string' ? typeof v !== 'string' : typeof v !== 'number' || !Number.isFinite(v)) {
      throw new InvalidInputError(`${field}.${name}`, type === 'string' ? 'a string (schema.metadata)' : 'a finite number (schema.metadata)', v);
    }
  }
  let json: string;
  try {
    json = JSON.stringify(value);
  } catch (err) {
    throw new InvalidInputError(field, `JSON-serialisable (${(err as Error).message})`, value);
  }
  if (Buffer.byteLength(json) > MAX_METADATA_BYTES) {
    throw new InvalidInputError(field, `at most ${MAX_METADATA_BYTES} bytes as JSON`, value);
  }
  return JSON.parse(json) as Record<string, unknown>;
}

export function checkText(field: string, value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_TEXT_LENGTH) {
    throw new InvalidInputError(field, `a non-empty string of at most ${MAX_TEXT_LENGTH} characters`, value);
  }
  return value;
}

export function checkFiniteNumber(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new InvalidInputError(field, 'a finite number', value);
  return value;
}
