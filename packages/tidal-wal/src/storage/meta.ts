import type Database from 'better-sqlite3';

/**
 * One key of `tidal_meta`: the name it is stored under and how its value is written as text. Get one
 * from {@link META}; the stored names appear nowhere else.
 */
export interface MetaKey<T> {
  readonly name: string;
  readonly encode: (value: T) => string;
  readonly decode: (text: string) => T;
}

/** A number, stored as its decimal text (`String(n)`), as every version of the format has. */
function numberKey(name: string): MetaKey<number> {
  return Object.freeze({ name, encode: (value: number) => String(value), decode: (text: string) => Number(text) });
}

function textKey(name: string): MetaKey<string> {
  return Object.freeze({ name, encode: (value: string) => value, decode: (text: string) => text });
}

function jsonKey(name: string): MetaKey<unknown> {
  return Object.freeze({ name, encode: (value: unknown) => JSON.stringify(value), decode: (text: string) => JSON.parse(text) as unknown });
}

function namesKey(name: string): MetaKey<readonly string[]> {
  return Object.freeze({
    name,
    encode: (value: readonly string[]) => JSON.stringify(value),
    decode: (text: string) => JSON.parse(text) as string[],
  });
}

/**
 * Every key of the `tidal_meta` key/value table, with the type of its value. Values are text on
 * disk; the encodings are those of the format since version 1 (format 0 kept the write-path
 * counters in `wal_meta`, folded in by the 0 → 1 migration).
 */
export const META = Object.freeze({
  /** The schema's `embeddingDims` when the file was last opened: stored embeddings have this many dimensions. */
  embeddingDims: numberKey('embeddingDims'),
  /**
   * The schema the database was last opened with, as a schema definition with every default
   * written out (JSON): read when `.schema()` is left out, compared with the one given otherwise.
   * Written in the transaction that writes `kinds` (and the checkpoint a kind change rewrites).
   */
  schema: jsonKey('schema'),
  /**
   * The signal kind names, in the order the signal log and the slot checkpoint number them (JSON
   * array of strings): on open, stored kinds are remapped to the schema's by name.
   */
  kinds: namesKey('kinds'),
  /** The secret cursors are signed with: 32 random bytes, hex, made on first use. */
  cursorSecret: textKey('cursor_secret'),
  /** The highest signal sequence number handed out, so numbers stay monotonic across restarts. */
  lastSeq: numberKey('last_seq'),
  /** The sequence number the last slot checkpoint covers (absent: none). */
  checkpointSeq: numberKey('checkpoint_seq'),
  /** The chunk size, in bytes, the `signal_checkpoint` rows were written with. */
  checkpointChunkBytes: numberKey('checkpoint_chunk_bytes'),
  /**
   * The slot layout the `signal_checkpoint` rows were written in (the signal store's `SLOT_LAYOUT`);
   * absent: layout 1, the only one written before the key.
   */
  checkpointSlotLayout: numberKey('checkpoint_slot_layout'),
  /** This database's replica id in the replication log, made on the first open with replication. */
  replicaId: textKey('replica_id'),
  /** The replication log position of the last foreign batch applied (absent: none yet). */
  replicationPosition: textKey('replication_position'),
  /** The number of this replica's last own batch (absent: none numbered yet; see `replicationBatchBase`). */
  replicationBatch: numberKey('replication_batch'),
  /**
   * The number own batches were first numbered above: the first batch after it has no `prev` to
   * wait for (files of format 5 numbered batches by their first signal sequence number, so the
   * count starts above `last_seq` and stays above every number a follower stored for this replica).
   */
  replicationBatchBase: numberKey('replication_batch_base'),
});

/** The `tidal_meta` key/value table, read and written through the typed keys of {@link META}. */
export class Meta {
  readonly #get: Database.Statement<[string], string>;
  readonly #set: Database.Statement<[string, string]>;
  readonly #delete: Database.Statement<[string]>;

  constructor(db: Database.Database) {
    this.#get = db.prepare<[string], string>('SELECT value FROM tidal_meta WHERE key = ?').pluck();
    this.#set = db.prepare<[string, string]>('INSERT OR REPLACE INTO tidal_meta (key, value) VALUES (?, ?)');
    this.#delete = db.prepare<[string]>('DELETE FROM tidal_meta WHERE key = ?');
  }

  /** The stored value of `key`, or undefined if it was never set. */
  get<T>(key: MetaKey<T>): T | undefined {
    const text = this.#get.get(key.name);
    return text === undefined ? undefined : key.decode(text);
  }

  set<T>(key: MetaKey<T>, value: T): void {
    this.#set.run(key.name, key.encode(value));
  }

  /** Removes `key`, so {@link get} reads undefined again. */
  delete<T>(key: MetaKey<T>): void {
    this.#delete.run(key.name);
  }
}
