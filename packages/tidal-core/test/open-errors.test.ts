/** Every way an open can fail is a TidalError naming what to fix, never a raw SQLite or OS error. */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidInputError, TidalError } from 'tidal-load';
import { TidalDb } from '../src/db.js';
import { STORAGE_VERSION } from 'tidal-wal/storage';

const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000 }] };
const root = mkdtempSync(join(tmpdir(), 'tidal-open-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const open = (dir: string) =>
  TidalDb.builder()
    .path(dir)
    .schema(SCHEMA)
    .workers(1)
    .clock(() => 0)
    .open();

describe('open errors', () => {
  it('a tidal.db that is not a database is bad input naming the path', async () => {
    const dir = join(root, 'garbage');
    mkdirSync(dir);
    writeFileSync(join(dir, 'tidal.db'), Buffer.alloc(8192, 7));
    const err = await open(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect(err).toMatchObject({ field: 'path', value: dir });
    expect((err as Error).message).toContain('tidal.db');
  });

  it('a file written by a newer version is refused, naming both format versions', async () => {
    const dir = join(root, 'newer');
    mkdirSync(dir);
    const db = new Database(join(dir, 'tidal.db'));
    db.pragma(`user_version = ${STORAGE_VERSION + 1}`);
    db.close();
    const err = await open(dir).catch((e: unknown) => e);
    expect(TidalError.is(err)).toBe(true);
    expect(err).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'path' });
    expect((err as Error).message).toContain(`format ${STORAGE_VERSION + 1}`);
  });

  it('migrates a format-0 file: its write-path counters move into tidal_meta and its signals are kept', async () => {
    const dir = join(root, 'v0');
    const first = await open(dir);
    await first.signals([
      { item: 'a', kind: 'view' },
      { item: 'a', kind: 'view' },
    ]);
    await first.close();
    // Turn the file back into format 0: the counters in their own wal_meta table, user_version 0.
    const raw = new Database(join(dir, 'tidal.db'));
    raw.exec(`
      CREATE TABLE wal_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
      INSERT INTO wal_meta SELECT key, CAST(value AS INTEGER) FROM tidal_meta WHERE key IN ('last_seq', 'checkpoint_seq', 'checkpoint_chunk_bytes');
      DELETE FROM tidal_meta WHERE key IN ('last_seq', 'checkpoint_seq', 'checkpoint_chunk_bytes');
    `);
    raw.pragma('user_version = 0');
    const lastSeq = raw.prepare("SELECT value FROM wal_meta WHERE key = 'last_seq'").pluck().get();
    raw.close();
    expect(lastSeq).toBe(2);

    const again = await open(dir);
    expect(again.itemSignals('a').view?.count).toBe(2);
    // Numbering continues after the migrated counter.
    expect(await again.signal({ item: 'a', kind: 'view' })).toBe(3);
    await again.close();
    const check = new Database(join(dir, 'tidal.db'), { readonly: true });
    expect(check.pragma('user_version', { simple: true })).toBe(STORAGE_VERSION);
    expect(check.prepare("SELECT name FROM sqlite_master WHERE name = 'wal_meta'").get()).toBeUndefined();
    check.close();
  });
});
