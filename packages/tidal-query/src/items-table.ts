import type Database from 'better-sqlite3';

/**
 * The items table (`items`; created by the database's storage schema). The writer (main thread)
 * owns it; query workers read it through their own read-only connections. `ordinal` is the dense
 * integer id the in-memory structures use; it is also the ANN key. The text is indexed by each
 * worker's text index (text/text-index.ts), from this table alone: no FTS5 table is written.
 * `version` is bumped on every change so a worker can pull exactly the rows it has not seen. A row
 * with `present = 0` is an id known only from signals, or deleted.
 */
export interface ItemRow {
  ordinal: number;
  id: string;
  present: number;
  text: string | null;
  metadata: string | null;
  created_at: number | null;
  embedding: Buffer | null;
  version: number;
}

export interface StoredItem {
  ordinal: number;
  id: string;
  text: string | null;
  metadata: Record<string, unknown>;
  createdAt: number;
  embedding: Float32Array | null;
}

/** Writer-side statements; every method runs inside the caller's transaction. */
export class ItemsWriter {
  readonly #upsert: Database.Statement;
  readonly #key: Database.Statement;
  readonly #delete: Database.Statement;
  readonly #get: Database.Statement;
  readonly #maxVersion: Database.Statement;
  readonly #firstKeys: Database.Statement;
  readonly #keysAfter: Database.Statement;
  readonly #ordinalOf: Database.Statement;
  readonly #idAt: Database.Statement;
  readonly #next: Database.Statement;

  constructor(db: Database.Database) {
    this.#upsert = db.prepare(`
      INSERT INTO items (ordinal, id, present, text, metadata, created_at, embedding, version)
      VALUES (@ordinal, @id, 1, @text, @metadata, @createdAt, @embedding, @version)
      ON CONFLICT(ordinal) DO UPDATE SET present = 1, text = excluded.text, metadata = excluded.metadata,
        created_at = excluded.created_at, embedding = excluded.embedding, version = excluded.version`);
    this.#key = db.prepare('INSERT OR IGNORE INTO items (ordinal, id, present, version) VALUES (?, ?, 0, 0)');
    this.#delete = db.prepare(
      'UPDATE items SET present = 0, text = NULL, metadata = NULL, embedding = NULL, version = ? WHERE ordinal = ?',
    );
    this.#get = db.prepare('SELECT * FROM items WHERE id = ? AND present = 1');
    this.#maxVersion = db.prepare('SELECT COALESCE(MAX(version), 0) FROM items').pluck();
    // In id order: SQLite reads the pairs from the id index (a covering index, ~30 bytes a row)
    // rather than the table (embeddings and texts included), a page of it at a time.
    this.#firstKeys = db.prepare('SELECT id, ordinal FROM items ORDER BY id LIMIT ?').raw();
    this.#keysAfter = db.prepare('SELECT id, ordinal FROM items WHERE id > ? ORDER BY id LIMIT ?').raw();
    this.#ordinalOf = db.prepare('SELECT ordinal FROM items WHERE id = ?').pluck();
    this.#idAt = db.prepare('SELECT id FROM items WHERE ordinal = ?').pluck();
    this.#next = db.prepare('SELECT COALESCE(MAX(ordinal), -1) + 1 FROM items').pluck();
  }

  /** Records an id seen only through a signal, so its ordinal survives a restart. */
  ensureKey(ordinal: number, id: string): void {
    this.#key.run(ordinal, id);
  }

  /** Inserts or replaces the item's row. `_replacing` (the ordinal had a row already) changes nothing: one upsert serves both. */
  upsert(item: StoredItem, version: number, _replacing: boolean): void {
    this.#upsert.run({
      ordinal: item.ordinal,
      id: item.id,
      text: item.text,
      metadata: JSON.stringify(item.metadata),
      createdAt: item.createdAt,
      embedding: item.embedding ? Buffer.from(item.embedding.buffer, item.embedding.byteOffset, item.embedding.byteLength) : null,
      version,
    });
  }

  delete(ordinal: number, version: number): void {
    this.#delete.run(version, ordinal);
  }

  get(id: string): StoredItem | undefined {
    const row = this.#get.get(id) as ItemRow | undefined;
    return row ? rowToItem(row) : undefined;
  }

  maxVersion(): number {
    return this.#maxVersion.get() as number;
  }

  /** One past the highest ordinal with a row (0 for none). */
  nextOrdinal(): number {
    return this.#next.get() as number;
  }

  /** The ordinal of the row with this id (present or not), or undefined. */
  ordinalOf(id: string): number | undefined {
    return this.#ordinalOf.get(id) as number | undefined;
  }

  /** The id of the row with this ordinal, or undefined. */
  idAt(ordinal: number): string | undefined {
    return this.#idAt.get(ordinal) as string | undefined;
  }

  /** Up to `limit` rows' [id, ordinal], in id order, after the id `after` (from the first with null). */
  keysAfter(after: string | null, limit: number): [string, number][] {
    return (after === null ? this.#firstKeys.all(limit) : this.#keysAfter.all(after, limit)) as [string, number][];
  }
}

export function rowToItem(row: ItemRow): StoredItem {
  return {
    ordinal: row.ordinal,
    id: row.id,
    text: row.text,
    metadata: row.metadata ? (JSON.parse(row.metadata) as Record<string, unknown>) : {},
    createdAt: row.created_at ?? 0,
    embedding: row.embedding ? blobToVector(row.embedding) : null,
  };
}

export function blobToVector(blob: Buffer): Float32Array {
  // Copy: the Buffer's memory may be reused by better-sqlite3 and is not 4-byte aligned.
  const out = new Float32Array(blob.byteLength / 4);
  new Uint8Array(out.buffer).set(blob);
  return out;
}
