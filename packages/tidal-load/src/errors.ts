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
  'TIDAL_OVERLOADED',
  'TIDAL_BACKPRESSURE',
  'TIDAL_MEMORY_PRESSURE',
  'TIDAL_RATE_LIMITED',
  'TIDAL_SESSION_CLOSED',
  'TIDAL_WRITER_FAILED',
  'TIDAL_ABORTED',
  'TIDAL_TIMEOUT',
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

/**
 * Too many queries in flight: the admission cap refused this one at once, before any work was done.
 * Retry after `retryAfterMs`.
 */
export class OverloadedError extends TidalError {
  readonly retryAfterMs: number;
  readonly inFlight: number;
  readonly limit: number;

  constructor(inFlight: number, limit: number, retryAfterMs: number) {
    super('TIDAL_OVERLOADED', `overloaded: ${inFlight} queries in flight, admission limit ${limit}; retry after ${retryAfterMs} ms`);
    this.retryAfterMs = retryAfterMs;
    this.inFlight = inFlight;
    this.limit = limit;
  }
}

/**
 * The write queue is at or over its threshold: the write was refused before anything was enqueued.
 * `retryAfterMs` is the time the queue needs to drain below the threshold at the measured rate.
 */
export class BackpressureError extends TidalError {
  readonly retryAfterMs: number;
  readonly depth: number;
  readonly limit: number;

  constructor(depth: number, limit: number, retryAfterMs: number) {
    super('TIDAL_BACKPRESSURE', `write queue depth ${depth} is at or over the limit ${limit}; retry after ${retryAfterMs} ms`);
    this.retryAfterMs = retryAfterMs;
    this.depth = depth;
    this.limit = limit;
  }
}

/** The host is about to run out of memory (MemAvailable + SwapFree under the floor): writes are refused. */
export class MemoryPressureError extends TidalError {
  readonly availableBytes: number;
  readonly floorBytes: number;

  constructor(availableBytes: number, floorBytes: number) {
    super(
      'TIDAL_MEMORY_PRESSURE',
      `host memory available ${availableBytes} bytes (MemAvailable + SwapFree) is under the floor of ${floorBytes} bytes; writes are refused`,
    );
    this.availableBytes = availableBytes;
    this.floorBytes = floorBytes;
  }
}

/** An agent session exceeded its rate limit; the signal was not written. */
export class RateLimitedError extends TidalError {
  readonly agentId: string;
  readonly sessionId: string;
  /** The configured rate, in signals per second. */
  readonly limit: number;
  readonly retryAfterMs: number;

  constructor(agentId: string, sessionId: string, limit: number, retryAfterMs: number) {
    super(
      'TIDAL_RATE_LIMITED',
      `agent ${JSON.stringify(agentId)} session ${JSON.stringify(sessionId)} is over its limit of ${limit} signals/s; retry after ${retryAfterMs} ms`,
    );
    this.agentId = agentId;
    this.sessionId = sessionId;
    this.limit = limit;
    this.retryAfterMs = retryAfterMs;
  }
}

/** The session was closed (by the caller, by the TTL sweeper, or by close()). */
export class SessionClosedError extends TidalError {
  readonly sessionId: string;

  constructor(sessionId: string, operation: string) {
    super('TIDAL_SESSION_CLOSED', `cannot ${operation}: session ${JSON.stringify(sessionId)} is closed`);
    this.sessionId = sessionId;
  }
}

/**
 * The writer stopped after code that runs after a commit failed (a bug). Writes are refused from
 * then on; queries keep working, and the next open rebuilds exactly the acknowledged writes.
 */
export class WriterFailedError extends TidalError {
  constructor(cause: unknown) {
    super(
      'TIDAL_WRITER_FAILED',
      `the writer stopped after a committed batch could not be applied (${describeCause(cause)}); ` +
        'every acknowledged write is durable, writes are refused until the database is closed and opened again',
      { cause },
    );
  }
}

/**
 * The caller's `AbortSignal` aborted the call. `name` is `'AbortError'`, as for any aborted
 * web-platform call, and `cause` is the signal's reason. A query aborted before it started never ran.
 */
export class AbortedError extends TidalError {
  constructor(operation: string, reason: unknown) {
    super('TIDAL_ABORTED', `${operation} was aborted${reason instanceof Error ? `: ${reason.message}` : ''}`, { cause: reason });
    this.name = 'AbortError';
  }
}

/** The call's `timeoutMs` passed before it finished. A query that timed out before it started never ran. */
export class TimeoutError extends TidalError {
  readonly timeoutMs: number;

  constructor(operation: string, timeoutMs: number) {
    super('TIDAL_TIMEOUT', `${operation} timed out after ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

function describeCause(cause: unknown): string {
  return cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
}
