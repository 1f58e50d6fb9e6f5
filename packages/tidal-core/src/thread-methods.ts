/**
 * The one table of what a worker module's thread asks the database's thread to do: every write
 * (there is one writer) and the reads only that thread answers. The link's protocol
 * ({@link LinkCalls}), the database thread's handlers (thread-handlers.ts) and `ThreadDb`'s
 * forwarding methods are derived from it; `ServeDb` (tidal-serve) is {@link DbCalls}. A test
 * (test/worker-module.test.ts) ties it to `TidalDb`'s methods: each is here, or named in
 * {@link NOT_FOR_THREADS} with the reason.
 */
import type { TidalDb } from './db.js';
import type { QueryRecord } from './thread-db.js';

/** `TidalDb` methods a thread's handle has; `retrieve` and `search` run in the thread, and cross only when they must. */
export const THREAD_METHODS = [
  'retrieve',
  'search',
  'get',
  'itemSignals',
  'upsertItems',
  'delete',
  'signals',
  'upsertUsers',
  'getUser',
  'deleteUser',
  'hide',
  'unhide',
  'block',
  'unblock',
  'follow',
  'unfollow',
  'openSession',
  'sessionSignal',
  'closeSession',
  'openSessions',
  'stats',
] as const satisfies readonly (keyof TidalDb)[];

export type ThreadMethod = (typeof THREAD_METHODS)[number];

/** `TidalDb` members a thread's handle does not have, and why. */
export const NOT_FOR_THREADS = {
  upsert: 'upsertItems([item]) does the same',
  signal: 'the handle has it, sent across as signals([signal])',
  sweepSessions: 'the database thread sweeps on its own timer',
  warm: 'the database thread warms the workers, before any module starts',
  replicaSnapshot: 'a file of the database thread, by the application that opened it',
  flush: 'the writer flushes on its own; an acknowledged write is durable',
  close: 'the thread that opened the database closes it',
  path: 'the directory belongs to the thread that opened it',
  closed: 'the handle has its own (always false)',
  load: 'the handle has its own view of the one shared count',
} as const;

/** Each call across the link: its arguments as they cross, and its answer. */
export type LinkCalls = {
  readonly [M in ThreadMethod]: { readonly args: Parameters<TidalDb[M]>; readonly answer: Awaited<ReturnType<TidalDb[M]>> };
} & {
  readonly recordQueries: { readonly args: [records: readonly QueryRecord[]]; readonly answer: null };
  readonly moduleStarted: { readonly args: [threadId: number, failure: string | null]; readonly answer: null };
};

export type LinkMethod = keyof LinkCalls;

/** What the database's thread runs for each call. */
export type LinkHandlers = {
  readonly [M in LinkMethod]: (...args: LinkCalls[M]['args']) => LinkCalls[M]['answer'] | Promise<LinkCalls[M]['answer']>;
};

/**
 * A function type compared as a method is (its parameters bivariantly), so a `TidalDb<S>` whose
 * schema narrows what its methods take is still a {@link DbCalls}.
 */
type AsMethod<A extends unknown[], R> = { call(...args: A): R }['call'];

/**
 * The table's methods as one handle or the other answers them: `TidalDb` at once or with a
 * promise, a thread's handle always with a promise. What tidal serve's routes call.
 */
export type DbCalls = {
  [M in ThreadMethod]: AsMethod<LinkCalls[M]['args'], ReturnType<TidalDb[M]> | Promise<LinkCalls[M]['answer']>>;
};

/** The table's methods as a thread's handle has them, forwarded: always a promise. */
export type Forwarded = {
  [M in Exclude<ThreadMethod, 'retrieve' | 'search'>]: (...args: LinkCalls[M]['args']) => Promise<LinkCalls[M]['answer']>;
};

/** The methods every thread's handle forwards: one per entry of the table but `retrieve` and `search`. */
abstract class Forwarder {
  /** Sends `method(...args)` to the database's thread. */
  abstract forward<M extends LinkMethod>(method: M, args: LinkCalls[M]['args']): Promise<LinkCalls[M]['answer']>;
}
for (const m of THREAD_METHODS) {
  if (m === 'retrieve' || m === 'search') continue;
  Object.defineProperty(Forwarder.prototype, m, {
    value: function (this: Forwarder, ...args: never[]) {
      return this.forward(m, args as never);
    },
    writable: true,
    configurable: true,
  });
}

/** `ThreadDb`'s base: a method added to the table is on every thread's handle, with its types. */
export const Forwarding = Forwarder as unknown as abstract new () => Forwarder & Forwarded;

/** The database thread's handlers for the table's methods, each calling the method of `db`. */
export function dbHandlers(db: TidalDb): Pick<LinkHandlers, ThreadMethod> {
  const out: Record<string, (...args: never[]) => unknown> = {};
  for (const m of THREAD_METHODS) out[m] = (...args: never[]) => (db[m] as (...a: never[]) => unknown).apply(db, args);
  return out as unknown as Pick<LinkHandlers, ThreadMethod>;
}
