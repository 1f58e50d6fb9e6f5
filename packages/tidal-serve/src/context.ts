import type { IncomingMessage } from 'node:http';
import { ServeError } from './errors.js';

/** What the raw listener hands to the routes about one admitted request. */
export interface RequestContext {
  /** The chain's route name. */
  readonly route: string;
  readonly tenant: string;
  /** The error code the response carries, for the recorder and the metrics. */
  code: string | undefined;
  /** An AbortSignal that fires when the client goes away before the answer is written. */
  signal(): AbortSignal;
}

const contexts = new WeakMap<IncomingMessage, RequestContext>();

export function attachContext(req: IncomingMessage, ctx: RequestContext): void {
  contexts.set(req, ctx);
}

/** The context of a request the raw listener admitted, or `undefined` (exempt paths have none). */
export function findContext(req: IncomingMessage): RequestContext | undefined {
  return contexts.get(req);
}

/** The context the raw listener attached to an admitted request. */
export function contextOf(req: IncomingMessage): RequestContext {
  const ctx = contexts.get(req);
  if (ctx === undefined) throw new ServeError(500, 'TIDAL_SERVE_INTERNAL', 'request reached a route without passing admission');
  return ctx;
}
