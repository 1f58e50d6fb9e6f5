/**
 * A refusal as it goes on the wire, the same from `tidal serve`'s listener and from the fastify
 * plugin: the status, `Retry-After` in whole seconds rounded up, the exact milliseconds in
 * `x-retry-after-ms`, the stage's own headers, and the body `{ code, message, reason, retryAfterMs }`.
 */
import type { Refusal } from './types.js';

export const JSON_TYPE = 'application/json; charset=utf-8';

/** `{ code, message, ...fields }` as JSON, the fields' values numbers or strings. */
export function errorJson(code: string, message: string, reason?: string, retryAfterMs?: number): string {
  let text = `{"code":${JSON.stringify(code)},"message":${JSON.stringify(message)}`;
  if (reason !== undefined) text += `,"reason":${JSON.stringify(reason)}`;
  // As JSON.stringify writes a number: a non-finite one becomes null.
  if (retryAfterMs !== undefined) text += `,"retryAfterMs":${Number.isFinite(retryAfterMs) ? retryAfterMs : 'null'}`;
  return text + '}';
}

/** The wait a refusal states, whole milliseconds rounded up (a client never retries too soon). */
function retryMs(r: Refusal): number {
  return Math.max(0, Math.ceil(r.retryAfterMs));
}

/** A refusal's body. */
export function refusalBody(r: Refusal): string {
  return errorJson(r.code, r.message, r.reason, retryMs(r));
}

/**
 * A refusal's headers as one flat `[name, value, ...]` list (which `writeHead` copies as it is),
 * without the content headers.
 */
export function refusalHeaders(r: Refusal): string[] {
  const ms = retryMs(r);
  const headers: string[] = [];
  if (r.headers !== undefined) for (const k in r.headers) headers.push(k, r.headers[k]!);
  headers.push('retry-after', String(Math.ceil(ms / 1000)), 'x-retry-after-ms', String(ms));
  return headers;
}

/**
 * Whether the response goes without a `Date` header: a 503 does, which RFC 9110 (6.6.1) leaves
 * optional for 5xx answers and which costs every response a clock read and a copy (under overload
 * most answers are these). A 429 (a 4xx) keeps it.
 */
export function refusalSendsDate(r: Refusal): boolean {
  return r.status !== 503;
}
