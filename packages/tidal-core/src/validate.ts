import { InvalidInputError } from 'tidal-load';
import {
  MAX_EVENT_MS,
  type Diversity,
  type FieldCondition,
  type Filter,
  type Profile,
  type QuerySchema,
  type RangeCondition,
  type VelocityWindow,
} from 'tidal-query';

export const MAX_ID_LENGTH = 512;
export const MAX_TEXT_LENGTH = 100_000;
export const MAX_METADATA_BYTES = 64 * 1024;
export const MAX_LIMIT = 1000;
export const MAX_BATCH = 100_000;
const MAX_IN_VALUES = 1000;

/**
 * The largest |weight| a signal may carry. A slot's decayed score is Σ wᵢ·e^(−λ·(tRef − tᵢ)) with
 * tRef the newest event's time: every factor is at most 1 (a late event is decayed to tRef, the
 * reference never moves back, so nothing is ever multiplied by e^(+λ·Δt)), hence |score| ≤ Σ|wᵢ|.
 * At 1e12 per event, even 2^53 events on one slot and 64 kinds summed into a popularity stay below
 * 6e29, far from float64's 1.8e308, and a sum of weights keeps whole-unit precision up to ~9e15
 * (2^53). Any larger bound would only admit values no ranking needs while two of them can already
 * sum to Infinity (1e308 + 1e308), after which the score is Infinity or NaN for ever.
 */
export const MAX_WEIGHT = 1e12;

/** Float32's largest finite value: a larger component is stored as Infinity. */
const FLOAT32_MAX = 3.4028234663852886e38;
/** Float32's smallest normal magnitude: below it a component loses precision or becomes 0. */
const FLOAT32_MIN_NORMAL = 2 ** -126;

/**
 * A string that is not well-formed UTF-16 (it holds a lone surrogate) cannot be stored as given:
 * SQLite and the file system encode it as UTF-8, which replaces the surrogate with U+FFFD, so two
 * distinct ids would become one and the stored text would differ from the one written.
 */
function wellFormed(s: string): boolean {
  // String.prototype.isWellFormed is in Node 20; the project's TypeScript lib predates it.
  return (s as string & { isWellFormed(): boolean }).isWellFormed();
}

const ILL_FORMED = 'well-formed UTF-16 (it holds a lone surrogate, which storage would replace with U+FFFD)';

/** A whole number from `min` to `max`, or an InvalidInputError naming `field`. */
export function checkWhole(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidInputError(field, `a whole number from ${min} to ${max}`, value);
  }
  return value;
}

/** A string that is well-formed UTF-16, or an InvalidInputError naming `field`. */
export function checkWellFormed(field: string, value: string): string {
  if (!wellFormed(value)) throw new InvalidInputError(field, ILL_FORMED, value);
  return value;
}

/** Whether `id` is an item id every check accepts: for fast paths that then skip {@link checkId}. */
export function isValidId(id: unknown): id is string {
  return typeof id === 'string' && id.length > 0 && id.length <= MAX_ID_LENGTH && wellFormed(id);
}

/** Whether `weight` is one {@link checkWeight} accepts (`undefined` included): for fast paths. */
export function isValidWeight(weight: unknown): weight is number | undefined {
  return weight === undefined || (typeof weight === 'number' && weight >= -MAX_WEIGHT && weight <= MAX_WEIGHT);
}

export function checkId(field: string, id: unknown): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_LENGTH) {
    throw new InvalidInputError(field, `a non-empty string of at most ${MAX_ID_LENGTH} characters`, id);
  }
  return checkWellFormed(field, id);
}

/** A signal weight: a number from −{@link MAX_WEIGHT} to {@link MAX_WEIGHT} (NaN excluded). */
export function checkWeight(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value >= -MAX_WEIGHT && value <= MAX_WEIGHT)) {
    throw new InvalidInputError(field, `a finite number from -${MAX_WEIGHT} to ${MAX_WEIGHT}`, value);
  }
  return value;
}

/** Timestamps are milliseconds since the epoch, from 0 up to (not including) {@link MAX_EVENT_MS}. */
export function checkTime(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value >= MAX_EVENT_MS) {
    throw new InvalidInputError(field, `a timestamp in milliseconds since the epoch, from 0 to below ${MAX_EVENT_MS} (year 6053)`, value);
  }
  return value;
}

/** A query's `asJson`: true or false (absent: false). */
export function checkAsJson(value: unknown): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw new InvalidInputError('asJson', 'true or false', value);
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
  checkDense(field, value);
  return value;
}

/**
 * Refuses an array with holes (`[, x]`, `new Array(3)`, a deleted index). `map` and `flatMap` skip
 * holes, so a hole would escape every per-entry check and the entry counts downstream would
 * disagree (a batch would be numbered for more events than it writes).
 */
export function checkDense(field: string, value: readonly unknown[]): void {
  for (let i = 0; i < value.length; i++) {
    if (!Object.hasOwn(value, i)) throw new InvalidInputError(`${field}[${i}]`, 'an entry (the array has a hole here)', undefined);
  }
}

/**
 * A vector of the schema's dimension, copied into a Float32Array, as stored and searched. Every
 * component must survive the conversion: one beyond Float32's range (|x| > 3.4028234663852886e38)
 * would become Infinity, and a non-zero one below its smallest normal value (|x| < 2^-126 ≈
 * 1.1755e-38) would become 0 or a subnormal that has lost its digits, so the stored direction
 * would not be the one given. Both are refused; exact zeros are fine. Not all zero.
 */
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
    const f = Math.fround(x);
    if (x !== 0 && !(Math.abs(f) >= FLOAT32_MIN_NORMAL && Math.abs(f) <= FLOAT32_MAX)) {
      throw new InvalidInputError(
        `${field}[${i}]`,
        `0 or a number whose magnitude Float32 holds, from ${FLOAT32_MIN_NORMAL} to ${FLOAT32_MAX}`,
        x,
      );
    }
    out[i] = f;
    if (x !== 0) nonZero = true;
  }
  if (!nonZero) throw new InvalidInputError(field, 'a vector with at least one non-zero component (cosine needs a direction)', value);
  return out;
}

/**
 * An object literal (or `Object.create(null)`), not an array, a typed array or a class instance.
 * Field names are then read only as own properties: a name such as `constructor`, `toString` or
 * `__proto__` must never resolve to something `Object.prototype` holds.
 */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** The own property `name` of `o`, or undefined. */
function own(o: Readonly<Record<string, unknown>>, name: string): unknown {
  return Object.hasOwn(o, name) ? o[name] : undefined;
}

/** The declared type of a metadata field, looked up as an own property of the schema. */
function declaredType(schema: QuerySchema, name: string): 'string' | 'number' | undefined {
  return Object.hasOwn(schema.metadata, name) ? schema.metadata[name] : undefined;
}

export function checkFilter(value: unknown, schema: QuerySchema, field = 'filter'): Filter | null {
  if (value === undefined || value === null) return null;
  if (!isPlainObject(value)) throw new InvalidInputError(field, 'a plain object of field conditions', value);
  const out: Record<string, FieldCondition> = {};
  for (const name of Object.keys(value)) {
    const at = `${field}.${name}`;
    const type = name === 'createdAt' ? 'number' : declaredType(schema, name);
    if (type === undefined) {
      const known = ['createdAt', ...Object.keys(schema.metadata)].join(', ');
      throw new InvalidInputError(at, `a field declared in schema.metadata (${known})`, name);
    }
    out[name] = checkCondition(at, value[name], type);
  }
  return Object.keys(out).length === 0 ? null : out;
}

function checkCondition(at: string, cond: unknown, type: 'string' | 'number'): FieldCondition {
  const scalar = (where: string, v: unknown): string | number => {
    if (type === 'string' && typeof v === 'string') return checkWellFormed(where, v);
    if (type === 'number' && typeof v === 'number' && Number.isFinite(v)) return v;
    throw new InvalidInputError(where, type === 'string' ? 'a string' : 'a finite number', v);
  };
  if (!isPlainObject(cond)) {
    if (typeof cond === 'object' && cond !== null) {
      throw new InvalidInputError(
        at,
        type === 'string' ? 'a string or { in: [...] }' : 'a number, { in: [...] } or a plain object range',
        cond,
      );
    }
    return scalar(at, cond);
  }
  if (Object.hasOwn(cond, 'in')) {
    const list = cond.in;
    if (!Array.isArray(list) || list.length === 0 || list.length > MAX_IN_VALUES || Object.keys(cond).length !== 1) {
      throw new InvalidInputError(`${at}.in`, `a non-empty array of at most ${MAX_IN_VALUES} values (and no other key)`, list);
    }
    checkDense(`${at}.in`, list);
    const values: (string | number)[] = [];
    for (let i = 0; i < list.length; i++) values.push(scalar(`${at}.in[${i}]`, list[i]));
    return { in: values };
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
  const maxPerIn = isPlainObject(value) ? own(value, 'maxPer') : undefined;
  if (!isPlainObject(value) || !isPlainObject(maxPerIn) || Object.keys(maxPerIn).length === 0) {
    throw new InvalidInputError('diversity', 'an object { maxPer: { field: n } } with at least one field', value);
  }
  for (const k of Object.keys(value)) {
    if (k !== 'maxPer') throw new InvalidInputError(`diversity.${k}`, 'absent: diversity takes only maxPer', value[k]);
  }
  const maxPer: Record<string, number> = {};
  for (const name of Object.keys(maxPerIn)) {
    const n = maxPerIn[name];
    if (declaredType(schema, name) === undefined) {
      throw new InvalidInputError(
        `diversity.maxPer.${name}`,
        `a field declared in schema.metadata (${Object.keys(schema.metadata).join(', ')})`,
        name,
      );
    }
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) {
      throw new InvalidInputError(`diversity.maxPer.${name}`, 'a whole number of at least 1', n);
    }
    maxPer[name] = n;
  }
  return { maxPer };
}

export const PROFILES: readonly Profile[] = Object.freeze([
  'trending',
  'popular',
  'new',
  'for_you',
  'following',
  'hot',
  'rising',
  'top',
  'related',
]);
export const VELOCITY_WINDOWS: readonly VelocityWindow[] = Object.freeze(['1h', '24h', '7d']);

export function checkProfile(value: unknown, schema: QuerySchema): Profile {
  if (typeof value !== 'string' || !(PROFILES as readonly string[]).includes(value)) {
    throw new InvalidInputError('profile', `one of ${PROFILES.map((p) => `'${p}'`).join(', ')}`, value);
  }
  if ((value === 'trending' || value === 'rising') && !schema.kinds.some((k) => k.velocity)) {
    throw new InvalidInputError('profile', `a profile the schema supports ('${value}' needs a signal kind with velocity: true)`, value);
  }
  if (value === 'following' && schema.creatorField === undefined) {
    throw new InvalidInputError('profile', "a profile the schema supports ('following' needs creatorField)", value);
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
  checkDeclared(field, value, schema);
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (err) {
    throw new InvalidInputError(field, `JSON-serialisable (${(err as Error).message})`, value);
  }
  if (typeof json !== 'string') throw new InvalidInputError(field, 'JSON-serialisable to an object', value);
  if (Buffer.byteLength(json) > MAX_METADATA_BYTES) {
    throw new InvalidInputError(field, `at most ${MAX_METADATA_BYTES} bytes as JSON`, value);
  }
  // What is stored is the JSON form, so it is what must hold: a toJSON method can change a value
  // after the check above, and JSON itself turns a Date into a string.
  const parsed: unknown = JSON.parse(json);
  if (!isPlainObject(parsed)) throw new InvalidInputError(field, 'JSON-serialisable to an object', value);
  checkDeclared(field, parsed, schema);
  checkStrings(field, parsed);
  return parsed;
}

/** The declared metadata fields of `value` have their declared types (own properties only). */
function checkDeclared(field: string, value: Record<string, unknown>, schema: QuerySchema): void {
  for (const [name, type] of Object.entries(schema.metadata)) {
    const v = own(value, name);
    if (v === undefined || v === null) continue;
    if (type === 'string' ? typeof v !== 'string' : typeof v !== 'number' || !Number.isFinite(v)) {
      throw new InvalidInputError(
        `${field}.${name}`,
        type === 'string' ? 'a string (schema.metadata)' : 'a finite number (schema.metadata)',
        v,
      );
    }
  }
}

/** Refuses a string key or value, at any depth of a parsed JSON value, that is not well-formed. */
function checkStrings(at: string, v: unknown): void {
  if (typeof v === 'string') {
    checkWellFormed(at, v);
  } else if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) checkStrings(`${at}[${i}]`, v[i]);
  } else if (typeof v === 'object' && v !== null) {
    for (const [k, x] of Object.entries(v)) {
      if (!wellFormed(k)) throw new InvalidInputError(`${at}`, `an object whose keys are ${ILL_FORMED}`, k);
      checkStrings(`${at}.${k}`, x);
    }
  }
}

export function checkText(field: string, value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_TEXT_LENGTH) {
    throw new InvalidInputError(field, `a non-empty string of at most ${MAX_TEXT_LENGTH} characters`, value);
  }
  return checkWellFormed(field, value);
}

export function checkFiniteNumber(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new InvalidInputError(field, 'a finite number', value);
  return value;
}

/** A path argument: a non-empty string without NUL characters. */
export function checkFile(field: string, path: unknown): void {
  if (typeof path !== 'string' || path.length === 0 || path.includes('\u0000')) {
    throw new InvalidInputError(field, 'a non-empty path without NUL characters', path);
  }
}
