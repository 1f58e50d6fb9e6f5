import Database from 'better-sqlite3';
import { InvalidInputError } from 'tidal-load';

/**
 * How much an acknowledged write survives.
 * - `'process'`: the process being killed (`kill -9`, a crash). The batch is in SQLite's WAL file,
 *   written to the OS before the acknowledgement; the OS writes it to disk later. A power loss or a
 *   kernel panic can lose the last batches acknowledged before it.
 * - `'power'`: the machine losing power. SQLite fsyncs the WAL on every commit (one fsync per batch).
 * - `'none'`: nothing is promised (used for ephemeral databases, which are deleted on close).
 */
export type Durability = 'process' | 'power' | 'none';

export const DURABILITIES: readonly Durability[] = Object.freeze(['process', 'power', 'none']);

export function assertDurability(value: unknown, field = 'options.durability'): Durability {
  if (typeof value !== 'string' || !(DURABILITIES as readonly string[]).includes(value)) {
    throw new InvalidInputError(field, `one of ${DURABILITIES.map((d) => `'${d}'`).join(', ')}`, value);
  }
  return value as Durability;
}

const SYNCHRONOUS: Record<Durability, string> = { process: 'NORMAL', power: 'FULL', none: 'OFF' };

/**
 * Opens the single writer connection. WAL journal mode lets the query workers read while the writer
 * commits; `synchronous` carries the durability promise (see {@link Durability}).
 */
export function openWriterConnection(file: string, durability: Durability): Database.Database {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${SYNCHRONOUS[durability]}`);
  db.pragma('busy_timeout = 5000');
  // Checkpoints of the SQLite WAL into the main file run in the writer; the default of 1000 pages
  // keeps the WAL file small without checkpointing on every batch.
  db.pragma('wal_autocheckpoint = 1000');
  return db;
}
