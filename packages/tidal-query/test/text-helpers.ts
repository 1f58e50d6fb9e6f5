import { afterEach } from 'vitest';
import Database from 'better-sqlite3';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './helpers/random.js';
import { Catalog } from '../src/catalog.js';
import { ItemsWriter } from '../src/items-table.js';
import type { QuerySchema } from '../src/types.js';

export const SCHEMA: QuerySchema = { kinds: [], metadata: { cat: 'string' }, embeddingDims: 0 };

/** An FTS5 table's row and token totals, as its bm25() reads them (xRowCount, xColumnTotalSize). */
export interface Fts5Totals {
  rows: number;
  tokens: number;
}

/**
 * Reads an FTS5 table's "averages" record (rowid 1 of its `_data` table: a varint row count, then
 * a varint token total per column), the N and total size its bm25() scores with. A test-only
 * look at FTS5's private format: the product never reads it.
 */
export function fts5Totals(db: Database.Database, table: string): Fts5Totals {
  const block = db.prepare(`SELECT block FROM "${table}_data" WHERE id = 1`).pluck().get() as Buffer | undefined;
  if (!block || block.length === 0) return { rows: 0, tokens: 0 };
  const rows = readVarint(block, 0);
  const tokens = readVarint(block, rows.next);
  return { rows: rows.value, tokens: tokens.value };
}

/** SQLite's varint: big-endian 7-bit groups with a continuation bit; a 9th byte has 8 bits. */
function readVarint(buf: Uint8Array, at: number): { value: number; next: number } {
  let value = 0;
  for (let i = 0; i < 8; i++) {
    const byte = buf[at + i] ?? 0;
    value = value * 128 + (byte & 0x7f);
    if ((byte & 0x80) === 0) return { value, next: at + i + 1 };
  }
  return { value: value * 256 + (buf[at + 8] ?? 0), next: at + 9 };
}

/**
 * A database with tidal's tables, written through the items writer, and a worker's catalog over it
 * whose text index `sync` brings up to date. Beside them, in this fixture only, two FTS5 tables
 * over the same texts, written with every change: `oracle`, an FTS5 table with content (its totals
 * are the live counts, and its bm25() is what the index must reproduce), and `contentless`, a
 * contentless_delete one (whose totals keep every row ever inserted: what the index must not copy).
 */
export class TextFixture {
  readonly db = new Database(':memory:');
  readonly writer: ItemsWriter;
  readonly catalog: Catalog;
  readonly texts = new Map<number, string>();
  #version = 0;
  readonly #oracle: OracleTable;
  readonly #contentless: OracleTable;

  constructor() {
    openStorage(this.db, ':memory:');
    this.writer = new ItemsWriter(this.db);
    this.catalog = new Catalog(this.db, SCHEMA);
    this.#oracle = new OracleTable(this.db, 'oracle', '');
    this.#contentless = new OracleTable(this.db, 'contentless', ", content='', contentless_delete=1");
  }

  upsert(ordinal: number, text: string | null, cat = 'a'): void {
    const replacing = this.texts.has(ordinal) || this.#known.has(ordinal);
    this.db.transaction(() => {
      this.writer.upsert(
        { ordinal, id: `i${ordinal}`, text, metadata: { cat }, createdAt: 0, embedding: null },
        ++this.#version,
        replacing,
      );
      for (const t of [this.#oracle, this.#contentless]) t.set(ordinal, text, replacing);
    })();
    this.#known.add(ordinal);
    if (text) this.texts.set(ordinal, text);
    else this.texts.delete(ordinal);
  }

  delete(ordinal: number): void {
    this.db.transaction(() => {
      this.writer.delete(ordinal, ++this.#version);
      for (const t of [this.#oracle, this.#contentless]) t.set(ordinal, null, true);
    })();
    this.texts.delete(ordinal);
  }

  sync(): void {
    this.catalog.refresh();
  }

  /** The oracle's own top k: [ordinal, bm25()] pairs, ties by rowid. */
  fts5(match: string, k: number): [number, number][] {
    return this.#oracle.top(match, k);
  }

  /** The contentless_delete table's top k, as {@link fts5}. */
  contentlessFts5(match: string, k: number): [number, number][] {
    return this.#contentless.top(match, k);
  }

  /** The oracle's totals (`contentless`: the contentless_delete table's). */
  fts5Totals(table: 'oracle' | 'contentless' = 'oracle'): Fts5Totals {
    return fts5Totals(this.db, table);
  }

  close(): void {
    this.db.close();
  }

  readonly #known = new Set<number>();
}

/** One FTS5 table of the fixture, written as the items are: a replaced row is deleted first. */
class OracleTable {
  readonly #delete: Database.Statement;
  readonly #insert: Database.Statement;
  readonly #top: Database.Statement;

  constructor(db: Database.Database, name: string, options: string) {
    db.exec(`CREATE VIRTUAL TABLE ${name} USING fts5(text${options})`);
    this.#delete = db.prepare(`DELETE FROM ${name} WHERE rowid = ?`);
    this.#insert = db.prepare(`INSERT INTO ${name} (rowid, text) VALUES (?, ?)`);
    this.#top = db.prepare(`SELECT rowid, bm25(${name}) AS s FROM ${name} WHERE ${name} MATCH ? ORDER BY s, rowid LIMIT ?`).raw(true);
  }

  set(ordinal: number, text: string | null, replacing: boolean): void {
    if (replacing) this.#delete.run(ordinal);
    if (text) this.#insert.run(ordinal, text);
  }

  top(match: string, k: number): [number, number][] {
    return this.#top.all(match, k) as [number, number][];
  }
}

/** A seeded vocabulary with Zipf-like frequencies, spelled in several cases and accents. */
export function randomWords(seed: number, size: number): { word: (r: number) => string; rand: () => number; spellings: readonly string[] } {
  const rand = mulberry32(seed);
  const bases = ['cafe', 'creme', 'ecole', 'naive', 'jazz', 'piano', 'tokyo', '東京', 'straße', 'über'];
  const spellings: string[] = [];
  for (let i = 0; i < size; i++) {
    if (i < bases.length) spellings.push(bases[i]!);
    else spellings.push(`w${i.toString(36)}`);
  }
  const variants = (w: string): string => {
    const r = rand();
    if (w === 'cafe') return r < 0.3 ? 'Café' : r < 0.5 ? 'CAFÉ' : 'cafe';
    if (w === 'creme') return r < 0.5 ? 'Crème' : 'creme';
    if (w === 'ecole') return r < 0.5 ? 'ÉCOLE' : 'école';
    if (r < 0.1) return w.toUpperCase();
    return w;
  };
  return {
    rand,
    spellings,
    // Zipf-ish: index ~ size · r^2.
    word: (r) => variants(spellings[Math.min(size - 1, Math.floor(size * r * r))]!),
  };
}

/** A random text of 1..maxLen words separated by spaces and punctuation. */
export function randomText(words: ReturnType<typeof randomWords>, maxLen: number): string {
  const n = 1 + Math.floor(words.rand() * maxLen);
  const seps = [' ', ', ', ' — ', '! ', ' (', ') ', '…', '\n'];
  let s = '';
  for (let i = 0; i < n; i++) s += (i ? seps[Math.floor(words.rand() * seps.length)] : '') + words.word(words.rand());
  return s;
}

/** A fixture factory for one test file: every fixture it made is closed after each test. */
export function fixtures(): () => TextFixture {
  const open: TextFixture[] = [];
  afterEach(() => {
    for (const f of open.splice(0)) f.close();
  });
  return () => {
    const f = new TextFixture();
    open.push(f);
    return f;
  };
}
