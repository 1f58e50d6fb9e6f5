import type Database from 'better-sqlite3';
import { columnValue, growColumns, growF64, growU8, newColumn, writeMetadata, type Catalog, type Column } from './catalog.js';
import type { QuerySchema } from './types.js';

/** The members of {@link Catalog} that filters, user predicates, diversity and the result tail read. */
export type CatalogColumns = Pick<Catalog, 'ids' | 'present' | 'createdAt' | 'columns' | 'version' | 'fieldValue'>;

interface ColumnRow {
  ordinal: number;
  id: string;
  present: number;
  metadata: string | null;
  created_at: number | null;
  version: number;
}

/**
 * The items' ids, presence, creation times and metadata fields, dictionary-encoded exactly as a
 * worker's {@link Catalog} holds them, without the text index, the FTS5 totals or the embeddings:
 * what an executor on the main thread needs to filter and return items it already knows by ordinal
 * (profile `related`, whose candidates are the main thread's co-engagement list).
 *
 * Refreshed by version from the items table like the catalog, so it sees exactly the committed
 * item writes. Per item: an id reference (8 bytes), presence (1), creation time (8) and 4 or 8
 * bytes per metadata field; the ids themselves are strings of their own (SQLite hands out copies).
 */
export class ItemColumns implements CatalogColumns {
  ids: (string | undefined)[] = [];
  present: Uint8Array = new Uint8Array(1024);
  createdAt: Float64Array = new Float64Array(1024);
  readonly columns = new Map<string, Column>();
  version = 0;
  #capacity = 1024;
  readonly #select: Database.Statement;

  constructor(db: Database.Database, schema: QuerySchema) {
    for (const [field, type] of Object.entries(schema.metadata)) {
      this.columns.set(field, newColumn(type, 1024));
    }
    this.#select = db.prepare('SELECT ordinal, id, present, metadata, created_at, version FROM items WHERE version > ? ORDER BY version');
  }

  /** Pulls every row changed after the version seen so far; returns how many. */
  refresh(): number {
    let changed = 0;
    for (const row of this.#select.iterate(this.version) as IterableIterator<ColumnRow>) {
      this.#apply(row);
      if (row.version > this.version) this.version = row.version;
      changed++;
    }
    return changed;
  }

  /** Brings the columns up to `version` (the items version every acknowledged write reached). */
  syncTo(version: number): void {
    if (version > this.version) this.refresh();
  }

  /** The value of a metadata field for display or diversity, or undefined (as {@link Catalog.fieldValue}). */
  fieldValue(field: string, ordinal: number): string | number | undefined {
    return columnValue(this.columns, field, ordinal);
  }

  /**
   * These columns where a {@link Catalog} is expected, for the stages that read only the members of
   * {@link CatalogColumns} (the compile step of filters and user predicates, diversity, the tail):
   * never for a stage that walks the creation order, the text index or the ANN.
   */
  asCatalog(): Catalog {
    return this as CatalogColumns as Catalog;
  }

  #apply(row: ColumnRow): void {
    const o = row.ordinal;
    if (o >= this.#capacity) this.#grow(o + 1);
    this.ids[o] = row.id;
    const present = row.present === 1;
    this.present[o] = present ? 1 : 0;
    this.createdAt[o] = row.created_at ?? 0;
    writeMetadata(this.columns, o, row.metadata);
  }

  #grow(min: number): void {
    let cap = this.#capacity;
    while (cap < min) cap *= 2;
    this.present = growU8(this.present, cap);
    this.createdAt = growF64(this.createdAt, cap, 0);
    growColumns(this.columns, cap);
    this.#capacity = cap;
  }
}
