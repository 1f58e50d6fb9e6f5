/**
 * Every error tidal throws is a {@link TidalError} with a stable `code`. The codes are part of the
 * public API: `docs/errors.md` lists them and a test ties that list to {@link ERROR_CODES} both ways.
 */

const MARK = Symbol.for('tidal.error');

export const ERROR_CODES = [
  'TIDAL_INVALID_INPUT',
  'TIDAL_CLOSED',
  'TIDAL_CAPACITY',
  'TIDAL_INTERNAL',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/** Base class of every error tidal throws. */
export class TidalError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
    Object.defineProperty(this, MARK, { value: true });
  }

  /** True for any tidal error, even one thrown by another copy of the package. */
  static is(value: unknown): value is TidalError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[MARK] === true;
  }
}

/** Describes a value for an error message: `-1 (number)`, `"abc" (string)`, `NaN (number)`. */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') {
    const shown = value.length > 60 ? `${value.slice(0, 57)}...` : value;
    return `${JSON.stringify(shown)} (string of length ${value.length})`;
  }
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
    return `${String(value)} (${typeof value})`;
  }
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  if (ArrayBuffer.isView(value)) return `a ${value.constructor.name} of length ${(value as unknown as ArrayLike<unknown>).length}`;
  return `a value of type ${typeof value}`;
}

/** Bad input: names the field, what it must be and what it got. Nothing was written. */
export class InvalidInputError extends TidalError {
  readonly field: string;
  readonly value: unknown;

  constructor(field: string, expected: string, value: unknown) {
    super('TIDAL_INVALID_INPUT', `${field} must be ${expected}, got ${describeValue(value)}`);
    this.field = field;
    this.value = value;
  }
}

/** The database was closed; no call is served after `close()`. */
export class ClosedError extends TidalError {
  readonly operation: string;

  constructor(operation: string) {
    super('TIDAL_CLOSED', `cannot ${operation}: the database is closed`);
    this.operation = operation;
  }
}

/** A fixed-size structure is full (for example the shared signal-state arena). */
export class CapacityError extends TidalError {
  readonly resource: string;
  readonly limit: number;

  constructor(resource: string, limit: number, hint: string) {
    super('TIDAL_CAPACITY', `${resource} is full (limit ${limit}); ${hint}`);
    this.resource = resource;
    this.limit = limit;
  }
}

/** A bug or an unexpected failure underneath (a worker crash, a corrupt file). */
export class InternalError extends TidalError {
  constructor(message: string, options?: ErrorOptions) {
    super('TIDAL_INTERNAL', message, options);
  }
}
