import { afterEach } from 'vitest';
import Database from 'better-sqlite3';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from '../../../bench/src/random.js';
import { Catalog } from '../src/catalog.js';
import { ItemsWriter } from '../src/items-table.js';
import type { QuerySchema } from '../src/types.js';

export const SCHEMA: QuerySchema = { kinds: [], metadata: { cat: 'string' }, embeddingDims: 0 };

/**
 * A database with tidal's tables, written through the items writer (so FTS5 is maintained as the
 * writer maintains it), and a worker's catalog over it whose text index `sync` brings up to date.
 */
export class TextFixture {
  readonly db = new Database(':memory:');
  readonly writer: ItemsWriter;
  readonly catalog: Catalog;
  readonly texts = new Map<number, string>();
  #version = 0;
  readonly #fts: Database.Statement;

  constructor() {
    openStorage(this.db, ':memory:');
    this.writer = new ItemsWriter(this.db);
    this.catalog = new Catalog(this.db, SCHEMA);
    this.#fts = this.db.prepare('SELECT rowid, bm25(items_fts) AS s FROM items_fts WHERE items_fts MATCH ? ORDER BY s, rowid LIMIT ?').raw(true);
  }

  upsert(ordinal: number, text: string | null, cat = 'a'): void {
    const replacing = this.texts.has(ordinal) || this.#known.has(ordinal);
    this.db.transaction(() => {
      this.writer.upsert({ ordinal, id: `i${ordinal}`, text, metadata: { cat }, createdAt: 0, embedding: null }, ++this.#version, replacing);
    })();
    this.#known.add(ordinal);
    if (text) this.texts.set(ordinal, text);
    else this.texts.delete(ordinal);
  }

  delete(ordinal: number): void {
    this.db.transaction(() => this.writer.delete(ordinal, ++this.#version))();
    this.texts.delete(ordinal);
  }

  sync(): void {
    this.catalog.refresh();
  }

  /** FTS5's own top k: [ordinal, bm25()] pairs, ties by rowid. */
  fts5(match: string, k: number): [number, number][] {
    return this.#fts.all(match, k) as [number, number][];
  }

  close(): void {
    this.db.close();
  }

  readonly #known = new Set<number>();
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
