import type Database from 'better-sqlite3';
import type { FieldType, QuerySchema } from './types.js';
import type { ItemRow } from './items-table.js';
import { TextIndex, type TextIndexState } from './text/text-index.js';
import { hashString } from './user-state.js';

/** A string column, dictionary-encoded: filters compare integers, not strings. */
export interface StringColumn {
  readonly type: 'string';
  codes: Int32Array;
  readonly dict: Map<string, number>;
  readonly values: string[];
}

export interface NumberColumn {
  readonly type: 'number';
  values: Float64Array;
}

export type Column = StringColumn | NumberColumn;

export interface ChangedRow {
  ordinal: number;
  /** The items version the row was written at. */
  version: number;
  present: boolean;
  embedding: Buffer | null;
}

/**
 * A catalog's contents, as the catalog snapshot saves them (catalog-snapshot.ts): the arrays are
 * indexed by ordinal and all of one capacity (`present.length`), the metadata columns keyed by field.
 */
export interface CatalogState {
  version: number;
  ids: (string | undefined)[];
  present: Uint8Array;
  createdAt: Float64Array;
  presentCount: number;
  columns: ReadonlyMap<string, Column>;
  text: TextIndexState;
  /** The present ordinals newest first ({@link Catalog.byCreatedDesc}), `presentCount` of them. */
  byCreated: Int32Array;
}

/**
 * A worker's columnar copy of the items: ids, presence, creation time and the filterable metadata
 * fields, indexed by ordinal, and the inverted index of their text. It is refreshed from SQLite by
 * version, so a worker pulls only the rows that changed since it last looked.
 */
export class Catalog {
  ids: (string | undefined)[] = [];
  present: Uint8Array = new Uint8Array(1024);
  createdAt: Float64Array = new Float64Array(1024);
  readonly columns = new Map<string, Column>();
  /** The items' text, indexed for top-k BM25 (the search's stage 2). */
  text = new TextIndex();
  version = 0;
  /**
   * Rows refreshed since the catalog was imported (all of them when it never was): what a thread
   * holds of its own beside a shared image (shared/catalog-image.ts).
   */
  rowsSinceImport = 0;
  /**
   * Whether the presence, creation times and columns are views of a shared image: the first
   * change copies them ({@link #own}).
   */
  #shared = false;
  #capacity = 1024;
  /** Each ordinal's {@link idHash}, 0 until first asked for (and after its row changes). */
  #idHashes = new Uint32Array(0);
  #byCreated: Int32Array | null = null;
  /** The version {@link byCreatedDesc}'s cached order is of. */
  #byCreatedVersion = -1;
  /** Each refresh that changed rows: the version before it and the ordinals it changed (see {@link changedSince}). */
  readonly #log: { from: number; ordinals: Int32Array }[] = [];
  #logged = 0;
  #orderSorts = 0;
  #presentCount = 0;
  #embeddingsRead = 0;
  /**
   * Structures derived from this catalog built from scratch so far: the created order, the creator
   * lists, the int8 item vectors and the popular subset (each builder counts its own). Patching one
   * after a write is not a build. The worker reports a query's share as `explain.lazyBuilds`.
   */
  derivedBuilds = 0;
  readonly #db: Database.Database;
  readonly #select: Database.Statement;

  constructor(db: Database.Database, schema: QuerySchema) {
    for (const [field, type] of Object.entries(schema.metadata)) this.columns.set(field, newColumn(type, this.#capacity));
    this.#db = db;
    // The embedding only of rows after the first parameter: a row whose vector another thread wrote
    // already, and whose ANN index is not fed by this read, costs no BLOB copy (100 000 of them are
    // 51 MB of small native allocations in the reading thread).
    this.#select = db.prepare(
      'SELECT ordinal, id, present, text, metadata, created_at, CASE WHEN version > ? THEN embedding END AS embedding, version ' +
        'FROM items WHERE version > ? ORDER BY version',
    );
  }

  /** Rows whose embedding a refresh read (cumulative; see the `embeddingsAfter` of {@link refresh}). */
  get embeddingsRead(): number {
    return this.#embeddingsRead;
  }

  get presentCount(): number {
    return this.#presentCount;
  }

  /**
   * Pulls every row changed after the version this catalog has seen; calls `onRow` for each. Only
   * the rows written after `embeddingsAfter` (default: all) carry their embedding; the others
   * come with `embedding: null` (a caller that needs none passes `Infinity`).
   */
  refresh(onRow?: (row: ChangedRow) => void, embeddingsAfter = 0): number {
    // One read transaction: every row pulled is of the same commits.
    return this.#db.transaction(() => {
      const from = this.version;
      const ordinals: number[] = [];
      const after = Math.min(embeddingsAfter, Number.MAX_SAFE_INTEGER);
      for (const row of this.#select.iterate(after, this.version) as IterableIterator<ItemRow>) {
        this.#apply(row);
        if (row.embedding) this.#embeddingsRead++;
        onRow?.({ ordinal: row.ordinal, version: row.version, present: row.present === 1, embedding: row.embedding });
        if (row.version > this.version) this.version = row.version;
        ordinals.push(row.ordinal);
      }
      const changed = ordinals.length;
      this.rowsSinceImport += changed;
      if (changed > 0) {
        this.#record(from, ordinals);
      }
      return changed;
    })();
  }

  /** This catalog's contents (views of its arrays, valid until its next refresh). */
  exportState(): CatalogState {
    return {
      version: this.version,
      ids: this.ids,
      present: this.present,
      createdAt: this.createdAt,
      presentCount: this.#presentCount,
      columns: this.columns,
      text: this.text.exportState(),
      byCreated: this.byCreatedDesc(),
    };
  }

  /**
   * Makes a catalog that has never been refreshed hold `state` (its arrays are taken, not copied),
   * as if its refreshes had read the items up to `state.version`; the next refresh reads the rows
   * after that. The change log starts empty: caches derived from the catalog are built after it.
   */
  importState(state: CatalogState): void {
    if (this.version !== 0 || this.ids.length > 0) throw new Error('Catalog.importState: the catalog has been refreshed already');
    this.#check(state);
    this.text.importState(state.text);
    this.#take(state);
  }

  /**
   * Makes this catalog hold `state` (a shared image's, see shared/catalog-image.ts) in place of
   * whatever it held, at any time: its arrays are read where they are, and the first change after
   * copies them. The change log starts empty, so a structure derived from the catalog at another
   * version is rebuilt; one at the image's version is still of the same items. A catalog behind
   * the image goes forward to it, one ahead goes back and its next refresh reads its rows again.
   * @throws when `state` is not of this catalog's schema, leaving the catalog as it was.
   */
  rebase(state: CatalogState): void {
    this.#check(state);
    const text = new TextIndex();
    text.importState(state.text);
    this.#log.length = 0;
    this.#logged = 0;
    this.text = text;
    this.#take(state);
  }

  /** Throws unless `state`'s arrays fit together and its columns are this catalog's. */
  #check(state: CatalogState): void {
    const cap = state.present.length;
    if (cap < 1 || cap < state.ids.length || state.createdAt.length !== cap || state.byCreated.length !== state.presentCount) {
      throw new Error('Catalog.importState: inconsistent array sizes');
    }
    for (const [field, col] of this.columns) {
      const loaded = state.columns.get(field);
      if (!loaded || loaded.type !== col.type) throw new Error(`Catalog.importState: no ${col.type} column ${field}`);
      if ((loaded.type === 'string' ? loaded.codes.length : loaded.values.length) !== cap) {
        throw new Error(`Catalog.importState: column ${field} is not of the catalog's size`);
      }
    }
  }

  #take(state: CatalogState): void {
    for (const field of this.columns.keys()) this.columns.set(field, state.columns.get(field)!);
    this.ids = state.ids;
    this.#idHashes = new Uint32Array(0);
    this.present = state.present;
    this.createdAt = state.createdAt;
    this.#presentCount = state.presentCount;
    this.#capacity = state.present.length;
    this.version = state.version;
    // The saved order is of this version: the next refresh's changes patch it (no sort).
    this.#byCreated = state.byCreated;
    this.#byCreatedVersion = state.version;
    this.rowsSinceImport = 0;
    this.#shared = state.present.buffer instanceof SharedArrayBuffer;
  }

  /** Copies the arrays a shared image lent (see {@link #shared}) before the first change to them. */
  #own(): void {
    if (!this.#shared) return;
    this.#shared = false;
    this.present = this.present.slice();
    this.createdAt = this.createdAt.slice();
    for (const col of this.columns.values()) {
      if (col.type === 'string') col.codes = col.codes.slice();
      else col.values = col.values.slice();
    }
  }

  /**
   * The FNV-1a hash of ordinal `o`'s id ({@link hashString}; of '' without one): `for_you`'s
   * exploration order, one per candidate. Kept per ordinal once computed (4 bytes an item, this
   * thread's): hashing every candidate's id string again made `for_you` 1.07× dearer per call.
   */
  idHash(o: number): number {
    const kept = this.#idHashes[o];
    if (kept !== undefined && kept !== 0) return kept;
    const h = hashString(this.ids[o] ?? '');
    if (o >= this.#idHashes.length) {
      if (o >= this.#capacity) return h;
      const grown = new Uint32Array(this.#capacity);
      grown.set(this.#idHashes);
      this.#idHashes = grown;
    }
    this.#idHashes[o] = h;
    return h;
  }

  /** Whether the catalog's arrays are still a shared image's (nothing written since its import). */
  get shared(): boolean {
    return this.#shared;
  }

  #record(from: number, ordinals: number[]): void {
    this.#log.push({ from, ordinals: Int32Array.from(ordinals) });
    this.#logged += ordinals.length;
    while (this.#log.length > 1 && this.#logged > CHANGE_LOG_ORDINALS) this.#logged -= this.#log.shift()!.ordinals.length;
  }

  /**
   * The ordinals whose rows changed after `version` (each at most once), or null when the log no
   * longer reaches back that far (then rebuild from scratch). `version` must be one this catalog
   * was at after some refresh: caches derived from the catalog keep the version they were built at.
   */
  changedSince(version: number): Int32Array | null {
    if (version === this.version) return new Int32Array(0);
    const first = this.#log.findIndex((e) => e.from === version);
    if (first === -1) return null;
    const seen = new Set<number>();
    for (let i = first; i < this.#log.length; i++) for (const o of this.#log[i]!.ordinals) seen.add(o);
    return Int32Array.from(seen);
  }

  #apply(row: ItemRow): void {
    this.#own();
    const o = row.ordinal;
    if (o >= this.#capacity) this.#grow(o + 1);
    this.ids[o] = row.id;
    if (o < this.#idHashes.length) this.#idHashes[o] = 0;
    const wasPresent = this.present[o] === 1;
    const isPresent = row.present === 1;
    this.present[o] = isPresent ? 1 : 0;
    this.#presentCount += (isPresent ? 1 : 0) - (wasPresent ? 1 : 0);
    this.createdAt[o] = row.created_at ?? 0;
    this.text.set(o, isPresent ? row.text : null);
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

  /**
   * Present ordinals, newest first (ties by ordinal). Cached; after a refresh the cached order is
   * patched with the rows that changed (O(items + changed × log changed), a linear merge) rather
   * than sorted again (O(items × log items) through a comparator: 33–42 ms at 100 000 items).
   */
  byCreatedDesc(): Int32Array {
    if (this.#byCreated !== null && this.#byCreatedVersion === this.version) return this.#byCreated;
    const changed = this.#byCreated === null ? null : this.changedSince(this.#byCreatedVersion);
    this.#byCreated =
      changed !== null && changed.length <= this.#presentCount / INCREMENTAL_SHARE
        ? mergeCreated(
            this.#byCreated!,
            markOrdinals(changed, this.present.length),
            sortCreated(
              changed.filter((o) => this.present[o] === 1),
              this.createdAt,
            ),
            this.createdAt,
          )
        : (this.#orderSorts++, this.derivedBuilds++, this.sortByCreated());
    this.#byCreatedVersion = this.version;
    return this.#byCreated;
  }

  /** How many times {@link byCreatedDesc} sorted every item rather than patching its order. */
  get orderSorts(): number {
    return this.#orderSorts;
  }

  /** {@link byCreatedDesc} built from scratch: every present ordinal, sorted. */
  sortByCreated(): Int32Array {
    const out = new Int32Array(this.#presentCount);
    let n = 0;
    for (let o = 0; o < this.ids.length; o++) if (this.present[o] === 1) out[n++] = o;
    return sortCreated(out, this.createdAt);
  }

  /**
   * Bytes of this catalog's own typed arrays: presence, creation times, the metadata columns, the
   * cached created order and the change log (the ids and the string dictionaries are heap strings,
   * counted in the thread's heap; arrays a shared image lends are counted with the image).
   */
  get arrayBytes(): number {
    let bytes = ownBytes(this.present) + ownBytes(this.createdAt) + (this.#byCreated ? ownBytes(this.#byCreated) : 0);
    for (const col of this.columns.values()) bytes += ownBytes(col.type === 'string' ? col.codes : col.values);
    for (const e of this.#log) bytes += e.ordinals.byteLength;
    return bytes;
  }

  /** The value of a metadata field for display or diversity, or undefined. */
  fieldValue(field: string, ordinal: number): string | number | undefined {
    return columnValue(this.columns, field, ordinal);
  }
}

/** An array's bytes, 0 for a view of shared memory (a catalog image's, counted once per process). */
export function ownBytes(a: ArrayBufferView): number {
  return a.buffer instanceof SharedArrayBuffer ? 0 : a.byteLength;
}

/** Ordinals the change log holds at most; a cache further behind than that is rebuilt. */
const CHANGE_LOG_ORDINALS = 65_536;
/** A cached order is patched when at most 1/this of its items changed, and rebuilt past that. */
export const INCREMENTAL_SHARE = 8;

/** Sorts `ordinals` in place newest first, ties by ordinal (so the order is deterministic). */
export function sortCreated(ordinals: Int32Array, createdAt: Float64Array): Int32Array {
  return ordinals.sort((a, b) => createdAt[b]! - createdAt[a]! || a - b);
}

/**
 * `base` (newest first, ties by ordinal) without the ordinals `drop` marks (1), with `adds` (sorted
 * the same way, none of them in `base` unmarked) merged in at their places. A new array; `base` is
 * left as it was. O(base + adds).
 */
export function mergeCreated(base: Int32Array, drop: Uint8Array, adds: Int32Array, createdAt: Float64Array): Int32Array {
  let dropped = 0;
  for (let i = 0; i < base.length; i++) dropped += drop[base[i]!]!;
  const out = new Int32Array(base.length - dropped + adds.length);
  let n = 0;
  let j = 0;
  for (let i = 0; i < base.length; i++) {
    const o = base[i]!;
    if (drop[o] === 1) continue;
    // Every added ordinal that sorts before o goes first.
    while (j < adds.length && before(adds[j]!, o, createdAt)) out[n++] = adds[j++]!;
    out[n++] = o;
  }
  while (j < adds.length) out[n++] = adds[j++]!;
  return out;
}

/** A mark per ordinal, 1 for each of `ordinals`: the `drop` of {@link mergeCreated}. */
export function markOrdinals(ordinals: Int32Array, size: number): Uint8Array {
  const mark = new Uint8Array(size);
  for (const o of ordinals) mark[o] = 1;
  return mark;
}

/** Whether `a` comes before `b` newest first, ties by ordinal. */
function before(a: number, b: number, createdAt: Float64Array): boolean {
  const d = createdAt[b]! - createdAt[a]!;
  return d < 0 || (d === 0 && a < b);
}

/** The value of metadata field `field` of item `ordinal` in dictionary-encoded columns, or undefined. */
export function columnValue(columns: ReadonlyMap<string, Column>, field: string, ordinal: number): string | number | undefined {
  const col = columns.get(field);
  if (!col) return undefined;
  if (col.type === 'string') {
    const code = col.codes[ordinal] ?? -1;
    return code < 0 ? undefined : col.values[code];
  }
  const v = col.values[ordinal] ?? Number.NaN;
  return Number.isNaN(v) ? undefined : v;
}

export function newColumn(type: FieldType, cap: number): Column {
  return type === 'string'
    ? { type, codes: new Int32Array(cap).fill(-1), dict: new Map(), values: [] }
    : { type, values: new Float64Array(cap).fill(Number.NaN) };
}

/** Writes item `o`'s metadata fields (its JSON, or null for none) into the dictionary-encoded columns. */
export function writeMetadata(columns: ReadonlyMap<string, Column>, o: number, metadata: string | null): void {
  const meta = metadata ? (JSON.parse(metadata) as Record<string, unknown>) : {};
  for (const [field, col] of columns) {
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

/** Grows every column to `cap` ordinals (absent: code −1, NaN). */
export function growColumns(columns: ReadonlyMap<string, Column>, cap: number): void {
  for (const col of columns.values()) {
    if (col.type === 'string') col.codes = growI32(col.codes, cap, -1);
    else col.values = growF64(col.values, cap, Number.NaN);
  }
}

export function growU8(a: Uint8Array, cap: number): Uint8Array {
  const b = new Uint8Array(cap);
  b.set(a);
  return b;
}
function growI32(a: Int32Array, cap: number, fill: number): Int32Array {
  const b = new Int32Array(cap).fill(fill);
  b.set(a);
  return b;
}
export function growF64(a: Float64Array, cap: number, fill: number): Float64Array {
  const b = new Float64Array(cap).fill(fill);
  b.set(a);
  return b;
}
