/**
 * The database's session options (the builder's `.sessions({...})`): their type, frozen defaults and
 * the one resolve step that validates them.
 */
import { InvalidInputError } from 'tidal-load';
import type { SessionSummary } from './sessions.js';
import { checkWhole } from './validate.js';

/** Session options of the database (the builder's `.sessions({...})`). */
export interface SessionOptions {
  /**
   * TTL of a session opened without `ttlMs`: a whole number of milliseconds.
   * @default 1_800_000 (30 minutes)
   */
  defaultTtlMs?: number;
  /**
   * How often the sweeper closes expired sessions, in milliseconds. Its timer is `unref()`ed (it
   * never keeps the process alive), runs only while sessions are open, and stops at `close()`.
   * @default 60_000
   */
  sweepIntervalMs?: number;
  /**
   * Sessions open at once; `openSession` past it throws CapacityError.
   * @default 100_000 (bench/src/ratelimit.ts measures the heap a session holds, idle and once it
   * has signalled), plus a seen-set entry per further distinct item a session signals
   */
  maxOpen?: number;
  /**
   * Called with the summary of every session the TTL closes: by the sweeper, by a call that finds
   * its session expired, and during `open()` for sessions that expired while the database was closed.
   * An exception it throws (or a promise it rejects) is reported with `process.emitWarning` and
   * does not stop the sweep.
   */
  onExpired?: (summary: SessionSummary) => void | Promise<void>;
}

export interface FilledSessionOptions {
  defaultTtlMs: number;
  sweepIntervalMs: number;
  maxOpen: number;
  onExpired: ((summary: SessionSummary) => void | Promise<void>) | null;
}

export const SESSION_DEFAULTS = Object.freeze({
  defaultTtlMs: 30 * 60_000,
  // The sweeper only reclaims memory and tells the application: a call on an expired session finds
  // it expired whenever it comes, so a minute of lag changes nothing a caller can observe but the
  // timing of onExpired. bench/src/ratelimit.ts times a sweep of open sessions.
  sweepIntervalMs: 60_000,
  // A bound on the heap sessions hold when agents forget to close them (bench/src/ratelimit.ts
  // measures a session's heap, idle and with a bucket and a seen item).
  maxOpen: 100_000,
  /** A year: sessions are for agent runs, and the bound keeps `lastActiveAt + ttlMs` exact. */
  maxTtlMs: 365 * 86_400_000,
  /** setInterval's own limit (a signed 32-bit count of milliseconds). */
  maxSweepIntervalMs: 2 ** 31 - 1,
  maxOpenLimit: 2 ** 24,
});

/** Validates the session options (the one resolve step; `open()` refuses on a bad value). */
export function resolveSessionOptions(o: SessionOptions | undefined): FilledSessionOptions {
  if (o !== undefined && (typeof o !== 'object' || o === null)) throw new InvalidInputError('sessions', 'an object of session options', o);
  const onExpired = o?.onExpired ?? null;
  if (onExpired !== null && typeof onExpired !== 'function') {
    throw new InvalidInputError('sessions.onExpired', 'a function taking a SessionSummary', onExpired);
  }
  return {
    defaultTtlMs: checkWhole('sessions.defaultTtlMs', o?.defaultTtlMs ?? SESSION_DEFAULTS.defaultTtlMs, 1, SESSION_DEFAULTS.maxTtlMs),
    sweepIntervalMs: checkWhole(
      'sessions.sweepIntervalMs',
      o?.sweepIntervalMs ?? SESSION_DEFAULTS.sweepIntervalMs,
      1,
      SESSION_DEFAULTS.maxSweepIntervalMs,
    ),
    maxOpen: checkWhole('sessions.maxOpen', o?.maxOpen ?? SESSION_DEFAULTS.maxOpen, 1, SESSION_DEFAULTS.maxOpenLimit),
    onExpired,
  };
}
