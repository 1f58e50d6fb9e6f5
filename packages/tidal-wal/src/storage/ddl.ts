/**
 * The file format: every table and index of a tidal database, in one place (the migrations between
 * its versions are in `open.ts`, the keys of `tidal_meta` in `meta.ts`). `PRAGMA user_version`
 * holds the version a file was written with; `openStorage` brings an older file up to
 * {@link STORAGE_VERSION} in one transaction, or refuses a newer one.
 *
 * It lives in tidal-wal, the lowest package that writes the file. The classes that read and write
 * these tables (the signal log and slot checkpoint here, the items writer and catalog in
 * tidal-query, the session and user registries in tidal-core) only prepare statements: they never
 * create or alter a table, so the format cannot drift apart between packages.
 *
 * Version history:
 * - 0: the first release. Its write-path counters lived in a second key/value table, `wal_meta`.
 * - 1: one key/value table, `tidal_meta`, for every package.
 * - 2: users and their state (`users`, `user_seen`, `user_hidden`, `user_creators`,
 *   `user_affinity`). The step creates them (empty); nothing older changes.
 * - 3: the co-engagement index of profile `related` (`item_related`). The step creates it empty:
 *   co-engagement counts from the first user signal after the upgrade.
 * - 4: no FTS5 table: the text index is built from `items` alone. The step drops `items_fts`.
 * - 5: replication between replicas (`repl_outbox`, `repl_origins`, `repl_item_clock`). The step
 *   creates them empty: nothing written before the upgrade is in the outbox.
 * - 6: the co-engagement entries are logged (`related_log`) and a partner list is written when the
 *   log needs its row back, not in every batch that changed it; `item_related.upto` says which
 *   log rows a stored list holds. The step adds the column (0: the list holds every pair; the
 *   log starts empty).
 */
export const STORAGE_VERSION = 6;

/** The step from format 5 to 6 on a file whose `item_related` lacks `upto` (open.ts runs it). */
export const ADD_ITEM_RELATED_UPTO = 'ALTER TABLE item_related ADD COLUMN upto INTEGER NOT NULL DEFAULT 0';

/** Every table and index, as `CREATE ... IF NOT EXISTS`: running it on a current file changes nothing. */
export const TABLES = `
  -- Key/value settings and counters; every key and its value type is declared in meta.ts.
  CREATE TABLE IF NOT EXISTS tidal_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

  -- One row per item ordinal. present = 0: an id known only from signals, or deleted. version is
  -- bumped on every change so a query worker pulls exactly the rows it has not seen.
  CREATE TABLE IF NOT EXISTS items (
    ordinal INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    present INTEGER NOT NULL DEFAULT 0,
    text TEXT,
    metadata TEXT,
    created_at REAL,
    embedding BLOB,
    version INTEGER NOT NULL DEFAULT 0
  );
  CREATE INDEX IF NOT EXISTS items_by_version ON items(version);

  -- The durable signal log: every acknowledged signal since the last checkpoint (and the covered
  -- rows not yet reclaimed).
  CREATE TABLE IF NOT EXISTS signal_log (
    seq INTEGER PRIMARY KEY,
    ordinal INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    weight REAL NOT NULL,
    at REAL NOT NULL,
    session TEXT
  );

  -- The signal store's slots, byte for byte, in fixed-size chunks rewritten incrementally.
  CREATE TABLE IF NOT EXISTS signal_checkpoint (chunk INTEGER PRIMARY KEY, data BLOB NOT NULL);

  -- Open agent sessions and the items each one signalled.
  CREATE TABLE IF NOT EXISTS sessions (
    key INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    agent TEXT NOT NULL,
    opened_at REAL NOT NULL,
    ttl_ms REAL NOT NULL,
    last_active_at REAL NOT NULL,
    signals_written INTEGER NOT NULL DEFAULT 0,
    rejections INTEGER NOT NULL DEFAULT 0
  );
  CREATE TABLE IF NOT EXISTS session_items (
    session INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    PRIMARY KEY (session, ordinal)
  ) WITHOUT ROWID;

  -- Users (format 2). Their state is written in the same transaction as the batch that changed
  -- it, so it is never behind the acknowledged writes; the signal log is truncated by checkpoints
  -- and could not rebuild it. preference: the preference vector, Float32 little-endian, or NULL.
  CREATE TABLE IF NOT EXISTS users (
    key INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    metadata TEXT NOT NULL,
    embedding BLOB,
    preference BLOB
  );
  -- The seen set: the last items each user signalled, pos increasing with recency.
  CREATE TABLE IF NOT EXISTS user_seen (
    user INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    PRIMARY KEY (user, ordinal)
  ) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS user_hidden (
    user INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    PRIMARY KEY (user, ordinal)
  ) WITHOUT ROWID;
  -- relation 1: blocked, 2: followed.
  CREATE TABLE IF NOT EXISTS user_creators (
    user INTEGER NOT NULL,
    relation INTEGER NOT NULL,
    creator TEXT NOT NULL,
    PRIMARY KEY (user, relation, creator)
  ) WITHOUT ROWID;
  -- Creator affinity: a decayed score (S·e^(−λ·dt) + w) and the time it refers to.
  CREATE TABLE IF NOT EXISTS user_affinity (
    user INTEGER NOT NULL,
    creator TEXT NOT NULL,
    score REAL NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (user, creator)
  ) WITHOUT ROWID;

  -- The co-engagement index (format 3): per item ordinal, its partners as n × (partner, score,
  -- at), Float64 little-endian, holding every pair of related_log up to the row upto (format 6).
  CREATE TABLE IF NOT EXISTS item_related (
    ordinal INTEGER PRIMARY KEY,
    partners BLOB NOT NULL,
    upto INTEGER NOT NULL DEFAULT 0
  );
  -- The co-engagement of each committed batch that had any (format 6): id, one above the previous
  -- row's; entries, n × (item, partner, at) Float64 little-endian in the order counted (one per
  -- list a pair moves). A list replays the rows above its upto; rows every list holds are deleted.
  CREATE TABLE IF NOT EXISTS related_log (
    id INTEGER PRIMARY KEY,
    entries BLOB NOT NULL
  );

  -- Replication (format 5), written only by a database opened with a replication link, in the
  -- transaction of the batch concerned. The outbox: one row per committed batch of this replica's
  -- own writes (seq: the batch's number, one above the previous batch's, counted in tidal_meta
  -- replication_batch; at: the commit time in ms; body: the events as JSON); deleted once every
  -- live replica applied it.
  CREATE TABLE IF NOT EXISTS repl_outbox (
    seq INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    body TEXT NOT NULL
  );
  -- Per other replica: the number of its last batch applied here, that batch's commit time at the
  -- origin and here. A batch at or below seq is already applied and is dropped.
  CREATE TABLE IF NOT EXISTS repl_origins (
    origin TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    origin_at REAL NOT NULL,
    applied_at REAL NOT NULL
  ) WITHOUT ROWID;
  -- Per item id: the stamp (ms) and origin of its last write, upsert or delete (a deleted item's
  -- row is its tombstone): a write wins when (at, origin) is above the stored pair.
  CREATE TABLE IF NOT EXISTS repl_item_clock (
    id TEXT PRIMARY KEY,
    at REAL NOT NULL,
    origin TEXT NOT NULL
  ) WITHOUT ROWID;
`;
