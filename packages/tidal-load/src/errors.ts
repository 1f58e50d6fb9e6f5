/**
 * Every error tidal throws is a {@link TidalError} with a stable `code`. The codes are part of the
 * public API: `docs/errors.md` lists them and a test ties that list to {@link ERROR_CODES} both ways.
 */

import { describeSchemaChange, type SchemaChange } from './schema-changes.js';

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
  'TIDAL_SLOT_TIMEOUT',
  'TIDAL_POOLED_SESSION',
  'TIDAL_UNEXPECTED_REPLY',
  'TIDAL_DEPENDENCY_UNAVAILABLE',
  'TIDAL_DIRECTORY_LOCKED',
  'TIDAL_CURSOR_EXPIRED',
  'TIDAL_MISSING_PACKAGE',
  'TIDAL_SCHEMA_INCOMPATIBLE',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/** Base class of every error tidal throws. */
export class TidalError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }

  /**
   * True for any tidal error, even one thrown by another copy of the package. Each subclass has its
   * own `is`, true only for its code: `OverloadedError.is(err)`.
   */
  static is(value: unknown): value is TidalError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[MARK] === true;
  }
}

// The marker lives on the prototype, so every instance (of every subclass) carries it without an
// own property to define per construction (≈ 0.2 µs of a refusal's cost).
Object.defineProperty(TidalError.prototype, MARK, { value: true });

/**
 * The guard behind every subclass's `is`: the marker and the code, never `instanceof`, so an error
 * from a second copy of the package (a duplicated dependency, another realm) is still recognised.
 */
function hasCode(value: unknown, code: ErrorCode): boolean {
  return TidalError.is(value) && value.code === code;
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
  /** True for a `TIDAL_INVALID_INPUT` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is InvalidInputError {
    return hasCode(value, 'TIDAL_INVALID_INPUT');
  }

  readonly field: string;
  readonly value: unknown;

  constructor(field: string, expected: string, value: unknown, options?: ErrorOptions) {
    super('TIDAL_INVALID_INPUT', `${field} must be ${expected}, got ${describeValue(value)}`, options);
    this.field = field;
    this.value = value;
  }
}

/** The database was closed; no call is served after `close()`. */
export class ClosedError extends TidalError {
  /** True for a `TIDAL_CLOSED` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is ClosedError {
    return hasCode(value, 'TIDAL_CLOSED');
  }

  readonly operation: string;

  constructor(operation: string) {
    super('TIDAL_CLOSED', `cannot ${operation}: the database is closed`);
    this.operation = operation;
  }
}

/** A fixed-size structure is full (for example the shared signal-state arena). */
export class CapacityError extends TidalError {
  /** True for a `TIDAL_CAPACITY` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is CapacityError {
    return hasCode(value, 'TIDAL_CAPACITY');
  }

  /** What is full: `'item ids'`, `'signal state'`, `'open sessions'`. */
  readonly resource: string;
  /** How many the structure holds (the builder option that sizes it). */
  readonly capacity: number;

  constructor(resource: string, capacity: number, hint: string) {
    super('TIDAL_CAPACITY', `${resource} is full (capacity ${capacity}); ${hint}`);
    this.resource = resource;
    this.capacity = capacity;
  }
}

/** A bug or an unexpected failure underneath (a worker crash, a corrupt file). */
export class InternalError extends TidalError {
  /** True for a `TIDAL_INTERNAL` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is InternalError {
    return hasCode(value, 'TIDAL_INTERNAL');
  }

  constructor(message: string, options?: ErrorOptions) {
    super('TIDAL_INTERNAL', message, options);
  }
}

/**
 * Too many queries in flight: the admission cap refused this one at once, before any work was done.
 * Retry after `retryAfterMs`.
 */
export class OverloadedError extends TidalError {
  /** True for a `TIDAL_OVERLOADED` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is OverloadedError {
    return hasCode(value, 'TIDAL_OVERLOADED');
  }

  readonly retryAfterMs: number;
  /** Queries in flight when this one arrived (this one not included). */
  readonly inFlight: number;
  /** The admission cap: the most queries in flight at once. */
  readonly admissionLimit: number;

  /**
   * Built without a stack trace: a refusal is the expected answer under overload, not a bug, and
   * capturing the stack was most of its cost (≈ 5 µs of the ≈ 5 µs at the detector, ≈ 30 µs under a
   * deep HTTP stack; `npm run bench:admission`). `stack` holds the name and message only.
   */
  constructor(inFlight: number, admissionLimit: number, retryAfterMs: number) {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      super(
        'TIDAL_OVERLOADED',
        `overloaded: ${inFlight} queries in flight, admission limit ${admissionLimit}; retry after ${retryAfterMs} ms`,
      );
    } finally {
      Error.stackTraceLimit = limit;
    }
    this.retryAfterMs = retryAfterMs;
    this.inFlight = inFlight;
    this.admissionLimit = admissionLimit;
  }
}

/**
 * The write queue is at or over its threshold: the write was refused before anything was enqueued.
 * `retryAfterMs` is the time the queue needs to drain below the threshold at the measured rate.
 */
export class BackpressureError extends TidalError {
  /** True for a `TIDAL_BACKPRESSURE` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is BackpressureError {
    return hasCode(value, 'TIDAL_BACKPRESSURE');
  }

  readonly retryAfterMs: number;
  /** Events waiting to be committed when the write arrived. */
  readonly depth: number;
  /** The `groupCommit.maxQueueEvents` threshold, in events. */
  readonly maxQueueEvents: number;

  constructor(depth: number, maxQueueEvents: number, retryAfterMs: number) {
    super(
      'TIDAL_BACKPRESSURE',
      `write queue depth ${depth} is at or over maxQueueEvents ${maxQueueEvents}; retry after ${retryAfterMs} ms`,
    );
    this.retryAfterMs = retryAfterMs;
    this.depth = depth;
    this.maxQueueEvents = maxQueueEvents;
  }
}

/** The host is about to run out of memory (MemAvailable + SwapFree under the floor): writes are refused. */
export class MemoryPressureError extends TidalError {
  /** True for a `TIDAL_MEMORY_PRESSURE` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is MemoryPressureError {
    return hasCode(value, 'TIDAL_MEMORY_PRESSURE');
  }

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
  /** True for a `TIDAL_RATE_LIMITED` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is RateLimitedError {
    return hasCode(value, 'TIDAL_RATE_LIMITED');
  }

  readonly agentId: string;
  readonly sessionId: string;
  /** The configured sustained rate, in signals per second. */
  readonly ratePerSecond: number;
  /** The configured burst: signals a session may send at once after being idle. */
  readonly burst: number;
  readonly retryAfterMs: number;

  constructor(agentId: string, sessionId: string, ratePerSecond: number, retryAfterMs: number, burst: number) {
    super(
      'TIDAL_RATE_LIMITED',
      `agent ${JSON.stringify(agentId)} session ${JSON.stringify(sessionId)} is over its limit of ${ratePerSecond} signals/s ` +
        `(bursts of ${burst}); retry after ${retryAfterMs} ms`,
    );
    this.agentId = agentId;
    this.sessionId = sessionId;
    this.ratePerSecond = ratePerSecond;
    this.burst = burst;
    this.retryAfterMs = retryAfterMs;
  }
}

/** The session was closed (by the caller, by the TTL sweeper, or by close()). */
export class SessionClosedError extends TidalError {
  /** True for a `TIDAL_SESSION_CLOSED` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is SessionClosedError {
    return hasCode(value, 'TIDAL_SESSION_CLOSED');
  }

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
  /** True for a `TIDAL_WRITER_FAILED` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is WriterFailedError {
    return hasCode(value, 'TIDAL_WRITER_FAILED');
  }

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
  /** True for a `TIDAL_ABORTED` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is AbortedError {
    return hasCode(value, 'TIDAL_ABORTED');
  }

  constructor(operation: string, reason: unknown) {
    super('TIDAL_ABORTED', `${operation} was aborted${reason instanceof Error ? `: ${reason.message}` : ''}`, { cause: reason });
    this.name = 'AbortError';
  }
}

/** The call's `timeoutMs` passed before it finished. A query that timed out before it started never ran. */
export class TimeoutError extends TidalError {
  /** True for a `TIDAL_TIMEOUT` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is TimeoutError {
    return hasCode(value, 'TIDAL_TIMEOUT');
  }

  readonly timeoutMs: number;

  constructor(operation: string, timeoutMs: number) {
    super('TIDAL_TIMEOUT', `${operation} timed out after ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

/**
 * A call waited for one of a limited resource's concurrency slots and its deadline passed first. It
 * never held a slot, so nothing was sent to the resource.
 */
export class SlotTimeoutError extends TidalError {
  /** True for a `TIDAL_SLOT_TIMEOUT` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is SlotTimeoutError {
    return hasCode(value, 'TIDAL_SLOT_TIMEOUT');
  }

  /** The limited resource (the dependency whose calls take slots). */
  readonly dependency: string;
  /** Its limit: the most calls holding a slot at once, across every replica sharing it. */
  readonly maxConcurrentCalls: number;
  /** How long the call waited before giving up, in milliseconds. */
  readonly waitedMs: number;

  constructor(dependency: string, maxConcurrentCalls: number, waitedMs: number) {
    super(
      'TIDAL_SLOT_TIMEOUT',
      `${JSON.stringify(dependency)} takes ${maxConcurrentCalls} call${maxConcurrentCalls === 1 ? '' : 's'} at once; ` +
        `this one waited ${waitedMs} ms for a slot and its deadline passed`,
    );
    this.dependency = dependency;
    this.maxConcurrentCalls = maxConcurrentCalls;
    this.waitedMs = waitedMs;
  }
}

/**
 * The database connection does not keep one server session across statements (a transaction-pooling
 * proxy such as PgBouncer in transaction mode is in front of it), so session-level advisory locks
 * would be stranded on whichever session took them. The shared limit refuses to run on it.
 */
export class PooledSessionError extends TidalError {
  /** True for a `TIDAL_POOLED_SESSION` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is PooledSessionError {
    return hasCode(value, 'TIDAL_POOLED_SESSION');
  }

  /** What the check saw: the backend pids that answered, or the lock that was not visible. */
  readonly evidence: string;

  constructor(evidence: string) {
    super(
      'TIDAL_POOLED_SESSION',
      `the lock connection does not keep one PostgreSQL session (${evidence}): a transaction-pooling proxy would strand ` +
        'session-level advisory locks; connect the slots to PostgreSQL directly or through a session-mode pool',
    );
    this.evidence = evidence;
  }
}

/** A shared limiter's server answered something its script cannot return: the limiter cannot decide. */
export class UnexpectedReplyError extends TidalError {
  /** True for a `TIDAL_UNEXPECTED_REPLY` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is UnexpectedReplyError {
    return hasCode(value, 'TIDAL_UNEXPECTED_REPLY');
  }

  /** The limiter whose script answered (`'redis fixed window'`, `'redis token bucket'`). */
  readonly source: string;
  readonly reply: unknown;

  constructor(source: string, expected: string, reply: unknown) {
    super('TIDAL_UNEXPECTED_REPLY', `the ${source} script answered ${describeValue(reply)}, which it cannot return (${expected})`);
    this.source = source;
    this.reply = reply;
  }
}

/** Why a protected dependency did not answer: see {@link DependencyUnavailableError.reason}. */
export type DependencyFailure =
  /** Its bulkhead was full: refused at once, nothing was sent. */
  | 'shed'
  /** The call's deadline passed (while waiting for a slot, in flight, or before a retry could fit). */
  | 'deadline'
  /** It answered an error that is not worth retrying, or every attempt the retry policy allowed failed. */
  | 'failed';

/** A protected dependency (the embedder) could not serve this call. The caller degrades, it does not fail. */
export class DependencyUnavailableError extends TidalError {
  /** True for a `TIDAL_DEPENDENCY_UNAVAILABLE` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is DependencyUnavailableError {
    return hasCode(value, 'TIDAL_DEPENDENCY_UNAVAILABLE');
  }

  /** The dependency's name (the name its concurrency slots are taken under, when it has some). */
  readonly dependency: string;
  readonly reason: DependencyFailure;
  /** Requests sent to the dependency for this call (0 when shed). */
  readonly attempts: number;

  constructor(dependency: string, reason: DependencyFailure, attempts: number, detail: string, options?: ErrorOptions) {
    super(
      'TIDAL_DEPENDENCY_UNAVAILABLE',
      `${JSON.stringify(dependency)} is unavailable (${reason}) after ${attempts} attempt${attempts === 1 ? '' : 's'}: ${detail}`,
      options,
    );
    this.dependency = dependency;
    this.reason = reason;
    this.attempts = attempts;
  }
}

/**
 * A database directory is open in another process (or another database of this one): a directory
 * has one owner, whose side files and in-memory state assume no other writer.
 */
export class DirectoryLockedError extends TidalError {
  /** True for a `TIDAL_DIRECTORY_LOCKED` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is DirectoryLockedError {
    return hasCode(value, 'TIDAL_DIRECTORY_LOCKED');
  }

  /** The directory. */
  readonly path: string;
  /** The process that holds it. */
  readonly pid: number;

  constructor(path: string, pid: number, since: string) {
    super(
      'TIDAL_DIRECTORY_LOCKED',
      pid === process.pid
        ? `${path} is already open in this process (since ${since}): close that database first`
        : `${path} is open in process ${pid} (since ${since}): one process owns a database directory; close it there first`,
    );
    this.path = path;
    this.pid = pid;
  }
}

/** Why a cursor's pinned ranking is gone (see {@link CursorExpiredError}). */
export type CursorGoneReason = 'expired' | 'evicted' | 'reopened';

/**
 * A cursor whose pinned ranking the database no longer keeps: past its time to live, evicted to
 * keep the pinned rankings within their bound, or made before the database was last opened (they
 * are kept in memory). Its next page would come from another ranking, so none is served: start
 * the query again without a cursor.
 */
export class CursorExpiredError extends TidalError {
  /** True for a `TIDAL_CURSOR_EXPIRED` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is CursorExpiredError {
    return hasCode(value, 'TIDAL_CURSOR_EXPIRED');
  }

  /** The request field: always `'cursor'`. */
  readonly field = 'cursor';
  readonly reason: CursorGoneReason;

  /** `why` completes "the cursor's pinned ranking …". */
  constructor(reason: CursorGoneReason, why: string) {
    super('TIDAL_CURSOR_EXPIRED', `cursor refused: its pinned ranking ${why}; start the query again without a cursor`);
    this.reason = reason;
  }
}

/**
 * A package a feature needs is not installed, or its native binding was never built (an install
 * with scripts turned off: pnpm's default, `npm install --ignore-scripts`). The message names the
 * package, what needs it and the command that fixes it.
 */
export class MissingPackageError extends TidalError {
  /** True for a `TIDAL_MISSING_PACKAGE` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is MissingPackageError {
    return hasCode(value, 'TIDAL_MISSING_PACKAGE');
  }

  /** The npm package to install or rebuild. */
  readonly packageName: string;
  /** What needs it: `open()`, `--redis`, ... */
  readonly neededBy: string;
  /** The command that fixes it. */
  readonly fix: string;

  /** `problem` completes "<packageName> …": `is not installed`, `has no built native binding`. */
  constructor(packageName: string, neededBy: string, problem: string, fix: string, options?: ErrorOptions) {
    super('TIDAL_MISSING_PACKAGE', `${neededBy} needs the package ${packageName}, which ${problem}: run \`${fix}\``, options);
    this.packageName = packageName;
    this.neededBy = neededBy;
    this.fix = fix;
  }
}

/**
 * The schema given to `open()` differs from the one the database stored in a way that drops or
 * reinterprets stored data (a removed signal kind, a changed half-life, a removed metadata field...).
 * Nothing was changed. Open with `migrate({ allow })` naming the changes to apply them.
 */
export class SchemaChangeError extends TidalError {
  /** True for a `TIDAL_SCHEMA_INCOMPATIBLE` error, even one thrown by another copy of the package. */
  static override is(value: unknown): value is SchemaChangeError {
    return hasCode(value, 'TIDAL_SCHEMA_INCOMPATIBLE');
  }

  /** The first refused change's schema path: `schema.signals.like.halfLifeMs`. */
  readonly field: string;
  /** Its stored value (undefined: absent). */
  readonly stored: unknown;
  /** Its given value (undefined: absent). */
  readonly given: unknown;
  /** Every refused change, in schema order. */
  readonly changes: readonly SchemaChange[];

  constructor(changes: readonly SchemaChange[]) {
    const first = changes[0]!;
    const allow = [...new Set(changes.map((c) => `'${c.change}'`))].join(', ');
    super(
      'TIDAL_SCHEMA_INCOMPATIBLE',
      `the schema given to open() changes the stored one in a way that drops or reinterprets stored data: ` +
        `${changes.map(describeSchemaChange).join('; ')}. Nothing was changed. To apply it, open with ` +
        `.migrate({ allow: [${allow}] }); to open with the stored schema, leave .schema() out`,
    );
    this.field = first.field;
    this.stored = first.stored;
    this.given = first.given;
    this.changes = changes;
  }
}

function describeCause(cause: unknown): string {
  return cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
}
