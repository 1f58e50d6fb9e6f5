/*
 * Errors that crossed a thread or a process, made again as their own classes (see errors.ts).
 */
import {
  AbortedError,
  BackpressureError,
  CapacityError,
  ClosedError,
  CursorExpiredError,
  DependencyUnavailableError,
  DirectoryLockedError,
  InternalError,
  InvalidInputError,
  MemoryPressureError,
  MissingPackageError,
  OverloadedError,
  PooledSessionError,
  RateLimitedError,
  SchemaChangeError,
  SessionClosedError,
  SlotTimeoutError,
  TimeoutError,
  UnexpectedReplyError,
  WriterFailedError,
  type ErrorCode,
  type TidalError,
} from './errors.js';

/** Each code's class: the type makes adding a code without its class a compile error. */
const CLASS_OF: { readonly [C in ErrorCode]: abstract new (...args: never[]) => TidalError } = {
  TIDAL_INVALID_INPUT: InvalidInputError,
  TIDAL_CLOSED: ClosedError,
  TIDAL_CAPACITY: CapacityError,
  TIDAL_INTERNAL: InternalError,
  TIDAL_OVERLOADED: OverloadedError,
  TIDAL_BACKPRESSURE: BackpressureError,
  TIDAL_MEMORY_PRESSURE: MemoryPressureError,
  TIDAL_RATE_LIMITED: RateLimitedError,
  TIDAL_SESSION_CLOSED: SessionClosedError,
  TIDAL_WRITER_FAILED: WriterFailedError,
  TIDAL_ABORTED: AbortedError,
  TIDAL_TIMEOUT: TimeoutError,
  TIDAL_SLOT_TIMEOUT: SlotTimeoutError,
  TIDAL_POOLED_SESSION: PooledSessionError,
  TIDAL_UNEXPECTED_REPLY: UnexpectedReplyError,
  TIDAL_DEPENDENCY_UNAVAILABLE: DependencyUnavailableError,
  TIDAL_DIRECTORY_LOCKED: DirectoryLockedError,
  TIDAL_CURSOR_EXPIRED: CursorExpiredError,
  TIDAL_MISSING_PACKAGE: MissingPackageError,
  TIDAL_SCHEMA_INCOMPATIBLE: SchemaChangeError,
};

/**
 * An error that crossed a thread (or a process) as its code, message and public fields, made again
 * as the class of its code, so `instanceof RateLimitedError` holds wherever it was thrown. The
 * class's constructor is not run (its arguments are not what crossed): the fields are copied as
 * they were. An unknown code gives an `InternalError` naming it.
 */
export function reviveError(code: string, message: string, fields: Readonly<Record<string, unknown>> = {}): TidalError {
  const cls = (CLASS_OF as Readonly<Record<string, (typeof CLASS_OF)[ErrorCode]>>)[code];
  if (cls === undefined) return new InternalError(`an error with an unknown code crossed a thread: ${code}: ${message}`);
  const err = Reflect.construct(Error, [message], cls) as TidalError;
  Object.assign(err, fields, { code });
  err.name = cls.name;
  return err;
}
