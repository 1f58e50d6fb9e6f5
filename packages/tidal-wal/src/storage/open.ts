import type Database from 'better-sqlite3';
import { InvalidInputError } from 'tidal-load';
import { ADD_ITEM_RELATED_UPTO, STORAGE_VERSION, TABLES } from './ddl.js';

/** Steps from version `n` to `n + 1`, indexed by `n`; each runs after {@link TABLES} exists. */
const MIGRATIONS: readonly ((db: Database.Database) => void)[] = [
  // 0 → 1: fold wal_meta into tidal_meta. A new file has no wal_meta, and the step is a no-op.
  (db) => {
    const hasWalMeta = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'wal_meta'").get();
    if (!hasWalMeta) return;
    db.exec(`
      INSERT OR REPLACE INTO tidal_meta (key, value) SELECT key, CAST(value AS TEXT) FROM wal_meta;
      DROP TABLE wal_meta;
    `);
  },
  // 1 → 2: the user tables, created empty by TABLES (ddl.ts); a format-1 file has no users.
  () => {},
  // 2 → 3: item_related, created empty by TABLES (ddl.ts).
  () => {},
  // 3 → 4: items_fts is no longer written or read.
  (db) => db.exec('DROP TABLE IF EXISTS items_fts'),
  // 4 → 5: the replication tables, created empty by TABLES (ddl.ts).
  () => {},
  // 5 → 6: item_related.upto (a new file has it from TABLES); related_log is created empty by TABLES.
  (db) => {
    const columns = db.prepare("SELECT name FROM pragma_table_info('item_related')").pluck().all() as string[];
    if (!columns.includes('upto')) db.exec(ADD_ITEM_RELATED_UPTO);
  },
];

/**
 * Creates the tables of a new file, or migrates an older one to {@link STORAGE_VERSION}; returns
 * the version the file had. Runs on the writer connection before anything else touches the file.
 * @throws InvalidInputError (`path`) for a file written by a newer version of tidal.
 */
export function openStorage(db: Database.Database, file: string): number {
  const found = db.pragma('user_version', { simple: true }) as number;
  if (found > STORAGE_VERSION) {
    throw new InvalidInputError(
      'path',
      `a database of file format ${STORAGE_VERSION} or older (${file} has format ${found}, written by a newer version of tidal)`,
      file,
    );
  }
  if (found === STORAGE_VERSION) {
    // Same version: the tables exist, unless the file was created empty by someone else.
    db.exec(TABLES);
    return found;
  }
  db.transaction(() => {
    db.exec(TABLES);
    for (let v = found; v < STORAGE_VERSION; v++) MIGRATIONS[v]!(db);
    db.pragma(`user_version = ${STORAGE_VERSION}`);
  })();
  return found;
}
