/**
 * What a worker module's thread may ask the database's thread to do (see thread-db.ts): the
 * methods of the one table (thread-methods.ts), run on the database, and the thread's query
 * records. Each entry takes the arguments as they crossed the thread and returns what the caller
 * there receives.
 */
import type { TidalDb } from './db.js';
import type { QueryFront } from './query-front.js';
import { dbHandlers, type LinkHandlers } from './thread-methods.js';

export function threadHandlers(db: TidalDb, queries: QueryFront): Omit<LinkHandlers, 'moduleStarted'> {
  return {
    ...dbHandlers(db),
    recordQueries: (records) => {
      queries.recordFromThread(records);
      return null;
    },
  };
}
