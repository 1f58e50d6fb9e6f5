/**
 * What a worker module's thread may ask the database's thread to do (see thread-db.ts): the
 * writes, which have one writer, and the reads of state only this thread holds. Each entry takes
 * the arguments as they crossed the thread and returns what the caller there receives.
 */
import type { TidalDb } from './db.js';
import type { QueryFront } from './query-front.js';
import type { QueryRecord } from './thread-db.js';
import type { LinkHandlers } from './worker-link.js';

export function threadHandlers(db: TidalDb, queries: QueryFront): LinkHandlers {
  return {
    retrieve: (req: Parameters<TidalDb['retrieve']>[0]) => db.retrieve(req),
    search: (req: Parameters<TidalDb['search']>[0]) => db.search(req),
    get: (id: string) => db.get(id),
    itemSignals: (id: string) => db.itemSignals(id),
    upsertItems: (items: Parameters<TidalDb['upsertItems']>[0]) => db.upsertItems(items),
    delete: (id: string) => db.delete(id),
    signals: (batch: Parameters<TidalDb['signals']>[0]) => db.signals(batch),
    upsertUsers: (users: Parameters<TidalDb['upsertUsers']>[0]) => db.upsertUsers(users),
    getUser: (id: string) => db.getUser(id),
    deleteUser: (id: string) => db.deleteUser(id),
    hide: (edge: Parameters<TidalDb['hide']>[0]) => db.hide(edge),
    unhide: (edge: Parameters<TidalDb['unhide']>[0]) => db.unhide(edge),
    block: (edge: Parameters<TidalDb['block']>[0]) => db.block(edge),
    unblock: (edge: Parameters<TidalDb['unblock']>[0]) => db.unblock(edge),
    follow: (edge: Parameters<TidalDb['follow']>[0]) => db.follow(edge),
    unfollow: (edge: Parameters<TidalDb['unfollow']>[0]) => db.unfollow(edge),
    openSession: (options: Parameters<TidalDb['openSession']>[0]) => db.openSession(options),
    sessionSignal: (session: Parameters<TidalDb['sessionSignal']>[0], signal: Parameters<TidalDb['sessionSignal']>[1]) =>
      db.sessionSignal(session, signal),
    closeSession: (session: Parameters<TidalDb['closeSession']>[0]) => db.closeSession(session),
    openSessions: () => db.openSessions(),
    stats: () => db.stats(),
    recordQueries: (records: readonly QueryRecord[]) => {
      queries.recordFromThread(records);
      return null;
    },
  };
}
