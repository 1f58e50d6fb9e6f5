/**
 * Errors as HTTP answers. Every error body is `{ code, message, ...fields }`: the `TidalError`'s code
 * and its public fields (never `stack` or `cause`), or one of the server's own codes below.
 */

import {
  AbortedError,
  BackpressureError,
  CapacityError,
  ClosedError,
  CursorExpiredError,
  InvalidInputError,
  MemoryPressureError,
  OverloadedError,
  RateLimitedError,
  SessionClosedError,
  TidalError,
  TimeoutError,
} from 'tidal-core';

/** The server's own error codes, beside tidal's (`docs/serve.md` lists both with their statuses). */
export const SERVE_ERROR_CODES = [
  'TIDAL_SERVE_NOT_FOUND',
  'TIDAL_SERVE_UNAUTHORIZED',
  'TIDAL_SERVE_BODY_TOO_LARGE',
  'TIDAL_SERVE_UNSUPPORTED_MEDIA_TYPE',
  'TIDAL_SERVE_BAD_REQUEST',
  'TIDAL_SERVE_DRAINING',
  'TIDAL_SERVE_ANN_BUILDING',
  'TIDAL_SERVE_INTERNAL',
] as const;

export type ServeErrorCode = (typeof SERVE_ERROR_CODES)[number];

/** An error the HTTP layer raises itself: a status, a stable code and the fields a client needs. */
export class ServeError extends Error {
  readonly status: number;
  readonly code: ServeErrorCode;
  readonly fields: Readonly<Record<string, unknown>>;

  constructor(status: number, code: ServeErrorCode, message: string, fields: Readonly<Record<string, unknown>> = {}) {
    super(message);
    this.name = 'ServeError';
    this.status = status;
    this.code = code;
    this.fields = fields;
  }
}

/** What an error becomes on the wire. */
export interface ErrorReply {
  readonly status: number;
  readonly body: Readonly<Record<string, unknown>> & { readonly code: string; readonly message: string };
  /** `Retry-After` and `x-retry-after-ms`, when the error carries a retry figure. */
  readonly headers: Readonly<Record<string, string>>;
  /** False when the failure says the server is short of capacity (the adaptive limit reads it). */
  readonly capacityOk: boolean;
}

/** Status 499 (nginx's "client closed request"): recorded for an aborted query, never seen by the client. */
export const CLIENT_CLOSED = 499;

/** `Retry-After` takes whole seconds: rounded up, so a client never retries before `ms` has passed. */
export function retryHeaders(retryAfterMs: number): Record<string, string> {
  const ms = Math.max(0, Math.ceil(retryAfterMs));
  return { 'retry-after': String(Math.ceil(ms / 1000)), 'x-retry-after-ms': String(ms) };
}

/** Own enumerable fields of a tidal error minus what must not leave the process. */
function publicFields(err: TidalError): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(err)) {
    if (key === 'code' || key === 'name' || key === 'stack' || key === 'cause' || key === 'message') continue;
    // InvalidInputError's `value` is whatever the client sent; echoing an object back is noise,
    // and the message already describes it.
    if (key === 'value' && typeof value === 'object' && value !== null) continue;
    out[key] = value;
  }
  return out;
}

function statusOf(err: TidalError): number {
  if (OverloadedError.is(err) || BackpressureError.is(err) || MemoryPressureError.is(err) || ClosedError.is(err)) return 503;
  if (RateLimitedError.is(err)) return 429;
  if (InvalidInputError.is(err)) return 400;
  if (SessionClosedError.is(err)) return 409;
  if (CursorExpiredError.is(err)) return 410;
  if (CapacityError.is(err)) return 507;
  if (TimeoutError.is(err)) return 504;
  if (AbortedError.is(err)) return CLIENT_CLOSED;
  return 500;
}

/** Maps anything a handler threw onto its reply. Unknown errors become a 500 without their message. */
export function errorReply(err: unknown): ErrorReply {
  if (err instanceof ServeError) {
    return { status: err.status, body: { code: err.code, message: err.message, ...err.fields }, headers: {}, capacityOk: err.status < 500 };
  }
  if (TidalError.is(err)) {
    const status = statusOf(err);
    const retry = (err as { retryAfterMs?: unknown }).retryAfterMs;
    const headers = typeof retry === 'number' && Number.isFinite(retry) ? retryHeaders(retry) : {};
    const body = { code: err.code, message: err.message, ...publicFields(err) };
    // A timeout, a tidal 503 and an internal failure say the server is congested; a refused quota
    // (429), a bad request, a closed session or a client that went away do not.
    const capacityOk = status !== 503 && status !== 504 && status !== 500;
    return { status, body, headers, capacityOk };
  }
  return {
    status: 500,
    body: { code: 'TIDAL_SERVE_INTERNAL', message: 'internal error' },
    headers: {},
    capacityOk: false,
  };
}
