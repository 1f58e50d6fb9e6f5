import Database from 'better-sqlite3';
import { InvalidInputError, MissingPackageError } from 'tidal-load';

/**
 * How much an acknowledged write survives. A write is acknowledged (its promise resolves) only
 * after the SQLite transaction of its batch has committed; the modes differ in where the commit is
 * when that happens.
 * - `'process'` (default): the process dying (`kill -9`, a crash, an OOM kill). The batch's pages are
 *   written into SQLite's WAL file with `write()` before the acknowledgement (`synchronous=NORMAL`),
 *   so they are in the operating system's page cache, which outlives the process. Not fsynced: a
 *   power loss or a kernel panic can lose the last batches acknowledged before it. SQLite still
 *   recovers a consistent prefix of the commits, and the database warns (`TIDAL_WAL_TAIL_LOST`)
 *   when it can tell that acknowledged commits were cut off.
 * - `'power'`: the machine losing power. SQLite fsyncs the WAL before each commit returns
 *   (`synchronous=FULL`): one fsync per batch, not per write, which is what group commit buys.
 *   Only as good as the disk's honouring of flush requests.
 * - `'none'`: nothing is promised (`synchronous=OFF`); used for ephemeral databases, which are
 *   deleted on close.
 */
export type Durability = 'process' | 'power' | 'none';

export const DURABILITIES: readonly Durability[] = Object.freeze(['process', 'power', 'none']);

export function assertDurability(value: unknown, field = 'options.durability'): Durability {
  if (typeof value !== 'string' || !(DURABILITIES as readonly string[]).includes(value)) {
    throw new InvalidInputError(field, `one of ${DURABILITIES.map((d) => `'${d}'`).join(', ')}`, value);
  }
  return value as Durability;
}

// What better-sqlite3 (through `bindings`) throws when its native addon is missing, or was built for
// another Node.js (`NODE_MODULE_VERSION` differs).
const NO_BINDING = /Could not locate the bindings file|NODE_MODULE_VERSION|compiled against a different Node\.js version/;

/**
 * `new Database(file)`, where better-sqlite3 loads its native addon on first use: an install that
 * skipped its install script (pnpm's default, `--ignore-scripts`) or one built for another Node
 * fails here with a list of paths, so it becomes an error that names the package and the fix.
 */
export function openDatabase(file: string, options?: Database.Options): Database.Database {
  try {
    return new Database(file, options);
  } catch (err) {
    if (err instanceof Error && NO_BINDING.test(err.message)) {
      throw new MissingPackageError(
        'better-sqlite3',
        'opening a database',
        `has no native binding built for Node ${process.version} (its install script did not run, or ran under another Node; with pnpm, allow it with pnpm approve-builds)`,
        'npm rebuild better-sqlite3',
        { cause: err },
      );
    }
    throw err;
  }
}

/** The size the WAL file is cut back to each time it starts over (64 MiB). */
export const WAL_FILE_LIMIT_BYTES = 64 * 1024 * 1024;

const SYNCHRONOUS: Record<Durability, string> = { process: 'NORMAL', power: 'FULL', none: 'OFF' };

/**
 * Opens the single writer connection. WAL journal mode lets the query workers read while the writer
 * commits; `synchronous` carries the durability promise (see {@link Durability}).
 */
export function openWriterConnection(file: string, durability: Durability): Database.Database {
  const db = openDatabase(file);
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${SYNCHRONOUS[durability]}`);
  db.pragma('busy_timeout = 5000');
  // SQLite's own trigger for copying the WAL into the main file (every 1000 pages). A database
  // hands this job to a WalCheckpointer worker, which turns it off here while it runs.
  db.pragma('wal_autocheckpoint = 1000');
  // What the WAL file is cut back to when SQLite starts it over: without it the file keeps its
  // largest size (860 MB after loading 100 000 items, whose commits never pause).
  db.pragma(`journal_size_limit = ${WAL_FILE_LIMIT_BYTES}`);
  return db;
}
