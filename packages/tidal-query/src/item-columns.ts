import type Database from 'better-sqlite3';
import type { Catalog, Column } from './catalog.js';
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
      this.columns.set(field, type === 'string' ? { type, codes: new Int32Array(1024).fill(-1), dict: new Map(), values: [] } : { type, values: new Float64Array(1024).fill(Number.NaN) });
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
    const col = this.columns.get(field);
    if (!col) return undefined;
    if (col.type === 'string') {
      const code = col.codes[ordinal] ?? -1;
      return code < 0 ? undefined : col.values[code];
    }
    const v = col.values[ordinal] ?? Number.NaN;
    return Number.isNaN(v) ? undefined : v;
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
    const meta = row.metadata ? (JSON.parse(row.metadata) as Record<string, unknown>) : {};
    for (const [field, col] of this.columns) {
      const v = meta[field];
      if (col.type === 'string') {
        if (typeof v === 'string') {
          let code = col.dict.get(v);
          if (code === undefined) {
            code = col.values.length;
            col.values.push(v);
            col.dict.set(v, code);
          }
          col.codes[o] = code;
        } else {
          col.codes[o] = -1;
        }
      } else {
        col.values[o] = typeof v === 'number' ? v : Number.NaN;
      }
    }
  }

  #grow(min: number): void {
    let cap = this.#capacity;
    while (cap < min) cap *= 2;
    const present = new Uint8Array(cap);
    present.set(this.present);
    this.present = present;
    const created = new Float64Array(cap);
    created.set(this.createdAt);
    this.createdAt = created;
    for (const col of this.columns.values()) {
      if (col.type === 'string') {
        const codes = new Int32Array(cap).fill(-1);
        codes.set(col.codes);
        col.codes = codes;
      } else {
        const values = new Float64Array(cap).fill(Number.NaN);
        values.set(col.values);
        col.values = values;
      }
    }
    this.#capacity = cap;
  }
}
