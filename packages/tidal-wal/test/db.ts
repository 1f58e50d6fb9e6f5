import type Database from 'better-sqlite3';
import { openStorage } from '../src/storage/index.js';
import { openWriterConnection } from '../src/index.js';

/** A writer connection on `file` with the database's tables created, as a database opens one. */
export function openTestDb(file: string): Database.Database {
  const db = openWriterConnection(file, 'process');
  openStorage(db, file);
  return db;
}
