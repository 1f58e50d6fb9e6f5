import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { setMaxListeners } from 'node:events';
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

// A property of the request rather than a WeakMap entry: one store per request instead of an
// ephemeron the collector has to trace, and every IncomingMessage gets it on the same transition.
const CONTEXT = Symbol('tidal-serve.context');
const ABORT = Symbol('tidal-serve.abort');

interface WithContext {
  [CONTEXT]?: RequestContext;
}

interface WithAbort {
  [ABORT]?: AbortController;
}

export function attachContext(req: IncomingMessage, ctx: RequestContext): void {
  (req as IncomingMessage & WithContext)[CONTEXT] = ctx;
}

/** The context of a request the raw listener admitted, or `undefined` (exempt paths have none). */
export function findContext(req: IncomingMessage): RequestContext | undefined {
  return (req as IncomingMessage & WithContext)[CONTEXT];
}

/** The context the raw listener attached to an admitted request. */
export function contextOf(req: IncomingMessage): RequestContext {
  const ctx = (req as IncomingMessage & WithContext)[CONTEXT];
  if (ctx === undefined) throw new ServeError(500, 'TIDAL_SERVE_INTERNAL', 'request reached a route without passing admission');
  return ctx;
}

/**
 * The connection's AbortSignal: aborted when the socket closes. A client that goes away before its
 * answer closes the connection, so this is the request's "client gone" signal; and since a
 * keep-alive connection carries one request after another, one controller (and one `'close'`
 * listener) serves all of them instead of one per request. The queries remove their listeners
 * when they end, so they never pile up; pipelined requests may hold a few at once, hence no
 * listener-count warning.
 */
export function connectionSignal(socket: Socket): AbortSignal {
  const s = socket as Socket & WithAbort;
  let controller = s[ABORT];
  if (controller === undefined) {
    const c = new AbortController();
    controller = c;
    s[ABORT] = c;
    setMaxListeners(0, c.signal);
    if (socket.destroyed) c.abort(new Error('the client closed the connection'));
    else socket.once('close', () => c.abort(new Error('the client closed the connection')));
  }
  return controller.signal;
}
